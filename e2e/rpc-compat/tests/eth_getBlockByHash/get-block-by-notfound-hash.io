// gets block not found hash
>> {"jsonrpc":"2.0","id":1,"method":"eth_getBlockByHash","params":["0x00000000000000000000000000000000000000000000000000000000deadbeef",true]}
<< {"jsonrpc":"2.0","id":1,"result":null}
