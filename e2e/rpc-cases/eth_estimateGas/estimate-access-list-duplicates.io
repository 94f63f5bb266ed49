// An access list that names an account and a slot twice: each entry is paid (EIP-2930 counts entries, not distinct ones).
// (Recorded from geth 1.17.10 over e2e/rpc-compat's chain.)
>> {"jsonrpc":"2.0","id":1,"method":"eth_estimateGas","params":[{"from":"0x0102030000000000000000000000000000000000","input":"0xff01","to":"0x17e7eedce4ac02ef114a7ed9fe6e2f33feba1667","accessList":[{"address":"0x17e7eedce4ac02ef114a7ed9fe6e2f33feba1667","storageKeys":["0x0000000000000000000000000000000000000000000000000000000000000001","0x0000000000000000000000000000000000000000000000000000000000000001"]},{"address":"0x17e7eedce4ac02ef114a7ed9fe6e2f33feba1667","storageKeys":[]}]}]}
<< {"jsonrpc":"2.0","id":1,"result":"0x7566"}
