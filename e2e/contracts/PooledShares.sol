pragma solidity ^0.4.24;

// A staking pool's share ledger: `getShares(address)` (selector
// 0xf04da65b, as MetaMask's pooled-staking vault) backed by a mapping
// that is not the first state variable (slot 3), for the proxy's tests
// of listed getters beyond `balanceOf`.

contract PooledShares {
    address public owner;
    uint256 public totalShares;
    uint256 public totalAssets;
    mapping(address => uint256) private shares;

    constructor() public {
        owner = msg.sender;
    }

    function mint(address to, uint256 amount) public {
        require(msg.sender == owner, "owner only");
        shares[to] += amount;
        totalShares += amount;
    }

    function burn(address from, uint256 amount) public {
        require(msg.sender == owner, "owner only");
        shares[from] -= amount;
        totalShares -= amount;
    }

    function getShares(address account) public view returns (uint256) {
        return shares[account];
    }
}
