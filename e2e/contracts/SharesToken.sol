pragma solidity ^0.4.24;

// A stETH-style token: holders own shares; a balance is shares x pooled
// ether / total shares, so a rebase (the pooled ether changing) changes
// every balance without touching a holder's word.

contract SharesToken {
    address public owner;
    uint256 public totalPooledEther;
    uint256 public totalShares;
    mapping(address => uint256) internal shares;

    constructor() public {
        owner = msg.sender;
    }

    function mintShares(address to, uint256 amount) public {
        require(msg.sender == owner, "owner only");
        shares[to] += amount;
        totalShares += amount;
    }

    function rebase(uint256 pooled) public {
        require(msg.sender == owner, "owner only");
        totalPooledEther = pooled;
    }

    function sharesOf(address holder) public view returns (uint256) {
        return shares[holder];
    }

    function getPooledEthByShares(uint256 amount) public view returns (uint256) {
        if (totalShares == 0) {
            return 0;
        }
        return amount * totalPooledEther / totalShares;
    }

    function balanceOf(address holder) public view returns (uint256) {
        return getPooledEthByShares(shares[holder]);
    }
}
