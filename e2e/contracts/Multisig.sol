pragma solidity ^0.4.24;

// A multisig's shape as wallets read it: its owners, its threshold and
// its nonce, and a transaction an owner executes (its estimate).

contract Multisig {
    address[] internal owners;
    mapping(address => bool) public isOwner;
    uint256 public threshold;
    uint256 public nonce;

    constructor(address[] memory initialOwners, uint256 required) public {
        for (uint256 i = 0; i < initialOwners.length; i++) {
            owners.push(initialOwners[i]);
            isOwner[initialOwners[i]] = true;
        }
        threshold = required;
    }

    function () public payable {}

    function getOwners() public view returns (address[] memory) {
        return owners;
    }

    function execTransaction(address to, uint256 value, bytes data) public returns (bool ok) {
        require(isOwner[msg.sender], "owner only");
        nonce += 1;
        ok = to.call.value(value)(data);
        require(ok, "call failed");
    }
}
