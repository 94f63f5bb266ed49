pragma solidity ^0.4.24;

// An ERC-1155-style collection: `balanceOf(holder, id)` and its batch.

contract MultiTokens {
    address public minter;
    mapping(uint256 => mapping(address => uint256)) internal balances;

    constructor() public {
        minter = msg.sender;
    }

    function mint(address to, uint256 id, uint256 amount) public {
        require(msg.sender == minter, "minter only");
        balances[id][to] += amount;
    }

    function balanceOf(address holder, uint256 id) public view returns (uint256) {
        return balances[id][holder];
    }

    function balanceOfBatch(address[] holders, uint256[] ids) public view returns (uint256[]) {
        require(holders.length == ids.length, "ERC1155: accounts and ids length mismatch");
        uint256[] memory out = new uint256[](holders.length);
        for (uint256 i = 0; i < holders.length; i++) {
            out[i] = balances[ids[i]][holders[i]];
        }
        return out;
    }
}
