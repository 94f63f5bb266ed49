// An empty access list is an access-list call like any other.
// (Recorded from geth 1.17.10 over e2e/rpc-compat's chain.)
>> {"jsonrpc":"2.0","id":1,"method":"eth_call","params":[{"from":"0x0102030000000000000000000000000000000000","input":"0xff01","to":"0x17e7eedce4ac02ef114a7ed9fe6e2f33feba1667","accessList":[]},"latest"]}
<< {"jsonrpc":"2.0","id":1,"result":"0xffee"}
