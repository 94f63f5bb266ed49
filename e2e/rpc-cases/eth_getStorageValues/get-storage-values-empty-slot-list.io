// A contract named with no slots is an empty request.
// (Recorded from geth 1.17.10 over e2e/rpc-compat's chain.)
>> {"jsonrpc":"2.0","id":1,"method":"eth_getStorageValues","params":[{"0x17e7eedce4ac02ef114a7ed9fe6e2f33feba1667":[]},"latest"]}
<< {"jsonrpc":"2.0","id":1,"error":{"code":-32602,"message":"empty request"}}
