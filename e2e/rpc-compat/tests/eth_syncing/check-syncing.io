// checks client syncing status
>> {"jsonrpc":"2.0","id":1,"method":"eth_syncing"}
<< {"jsonrpc":"2.0","id":1,"result":false}
