// retrieves an account balance with the block parameter omitted, which defaults to latest
>> {"jsonrpc":"2.0","id":1,"method":"eth_getBalance","params":["0x7dcd17433742f4c0ca53122ab541d0ba67fc27df"]}
<< {"jsonrpc":"2.0","id":1,"result":"0x76"}
