pragma solidity ^0.4.24;

// An EIP-1967 proxy: the implementation's address in the standard slot
// (keccak256("eip1967.proxy.implementation") - 1); every call is run as
// the implementation's code over the proxy's storage (delegatecall).

contract Proxy1967 {
    constructor(address implementation) public {
        assembly {
            sstore(0x360894a13ba1a3210667c828492db98dca3e2076cc3735a920a3ca505d382bbc, implementation)
        }
    }

    function () public payable {
        assembly {
            let implementation := sload(0x360894a13ba1a3210667c828492db98dca3e2076cc3735a920a3ca505d382bbc)
            calldatacopy(0, 0, calldatasize)
            let ok := delegatecall(gas, implementation, 0, calldatasize, 0, 0)
            returndatacopy(0, 0, returndatasize)
            switch ok
            case 0 { revert(0, returndatasize) }
            default { return(0, returndatasize) }
        }
    }
}
