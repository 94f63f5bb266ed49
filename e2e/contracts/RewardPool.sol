pragma solidity ^0.4.24;

// A staking pool kept as MasterChef-style farms keep theirs: per user a
// struct whose second member is a mapping of reward token to debt, so
// that `users[user].rewardDebt[rewardToken]` sits at
// keccak(rewardToken . (keccak(user . 0) + 1)): a slot derived from the
// user through a hash, a struct offset and a second hash whose other
// input (the reward token) is read from the pool's own storage.

contract RewardPool {
    struct User {
        uint256 amount;
        mapping(address => uint256) rewardDebt;
    }

    mapping(address => User) internal users;
    address public rewardToken;

    constructor(address token) public {
        rewardToken = token;
    }

    function stake(address user, uint256 amount, uint256 debt) public {
        users[user].amount += amount;
        users[user].rewardDebt[rewardToken] = debt;
    }

    function rewardDebt(address user) public view returns (uint256) {
        return users[user].rewardDebt[rewardToken];
    }
}
