// An empty blobVersionedHashes is a blob call without blobs, which a node refuses.
// (Recorded from geth 1.17.10 over e2e/rpc-compat's chain.)
>> {"jsonrpc":"2.0","id":1,"method":"eth_estimateGas","params":[{"from":"0x0102030000000000000000000000000000000000","input":"0xff01","to":"0x17e7eedce4ac02ef114a7ed9fe6e2f33feba1667","blobVersionedHashes":[]}]}
<< {"jsonrpc":"2.0","id":1,"error":{"code":-32000,"message":"failed with 16777216 gas: blob transaction missing blob hashes"}}
