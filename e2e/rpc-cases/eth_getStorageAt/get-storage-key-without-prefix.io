// A storage key without 0x is hex, as geth reads it (never decimal).
// (Recorded from geth 1.17.10 over e2e/rpc-compat's chain.)
>> {"jsonrpc":"2.0","id":1,"method":"eth_getStorageAt","params":["0xaa00000000000000000000000000000000000000","10","latest"]}
<< {"jsonrpc":"2.0","id":1,"result":"0x0000000000000000000000000000000000000000000000000000000000000000"}
