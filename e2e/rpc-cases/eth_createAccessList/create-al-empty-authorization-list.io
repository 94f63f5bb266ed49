// An empty authorizationList: a call the node does not run is its error, not a list.
// (Recorded from geth 1.17.10 over e2e/rpc-compat's chain.)
>> {"jsonrpc":"2.0","id":1,"method":"eth_createAccessList","params":[{"from":"0x0102030000000000000000000000000000000000","input":"0xff01","to":"0x17e7eedce4ac02ef114a7ed9fe6e2f33feba1667","authorizationList":[]},"latest"]}
<< {"jsonrpc":"2.0","id":1,"error":{"code":-32000,"message":"failed to apply transaction: 0xc4cb553f107119e286e012d34d7c8d070aa2ca7e7a88f2ea8f182d12ea6c986b err: EIP-7702 transaction with empty auth list (sender 0x0102030000000000000000000000000000000000)"}}
