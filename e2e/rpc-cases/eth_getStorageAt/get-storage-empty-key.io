// The key 0x is slot 0.
// (Recorded from geth 1.17.10 over e2e/rpc-compat's chain.)
>> {"jsonrpc":"2.0","id":1,"method":"eth_getStorageAt","params":["0x17e7eedce4ac02ef114a7ed9fe6e2f33feba1667","0x","latest"]}
<< {"jsonrpc":"2.0","id":1,"result":"0x0000000000000000000000000000000000000000000000000000000000000000"}
