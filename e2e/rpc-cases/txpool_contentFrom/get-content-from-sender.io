// A sender's part of the pool (picked here from the whole pool: the node is never told the sender).
// (Recorded from geth 1.17.10 over e2e/rpc-compat's chain before any send: empty. Run after the
// suite's eth_sendRawTransaction cases, geth's answer then holds this sender's transactions.)
>> {"jsonrpc":"2.0","id":1,"method":"txpool_contentFrom","params":["0x0c2c51a0990aee1d73c1228de158688341557508"]}
<< {"jsonrpc":"2.0","id":1,"result":{"pending":{},"queued":{}}}
