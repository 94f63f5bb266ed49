pragma solidity ^0.4.24;

// An ERC-4626-style vault as MetaMask's pooled staking reads it:
// `getShares(user)`, then `convertToAssets(shares)` with the user's own
// number of shares.

contract StakingVault {
    address public owner;
    uint256 public totalAssets;
    uint256 public totalSupply;
    mapping(address => uint256) internal shares;

    constructor() public {
        owner = msg.sender;
    }

    function deposit(address to, uint256 newShares, uint256 assets) public {
        require(msg.sender == owner, "owner only");
        shares[to] += newShares;
        totalSupply += newShares;
        totalAssets += assets;
    }

    function reward(uint256 assets) public {
        require(msg.sender == owner, "owner only");
        totalAssets += assets;
    }

    function getShares(address account) public view returns (uint256) {
        return shares[account];
    }

    function convertToAssets(uint256 amount) public view returns (uint256) {
        if (totalSupply == 0) {
            return amount;
        }
        return amount * totalAssets / totalSupply;
    }
}
