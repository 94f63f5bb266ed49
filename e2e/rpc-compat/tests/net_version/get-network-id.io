// Calls net_version to retrieve the network ID, which is expected to be equal to the chainID of the test chain.
>> {"jsonrpc":"2.0","id":1,"method":"net_version"}
<< {"jsonrpc":"2.0","id":1,"result":"3503995874084926"}
