pragma solidity ^0.4.24;

// A dapp's lens in front of a RewardPool whose address it keeps in its
// own storage: a wallet calls `pending(user)` on the lens, so the pool
// and its reward token are named nowhere in the call (not its target,
// not in its data or an inner call's), and only the hash chain from the
// user names the pool's slot.

contract RewardPoolLike {
    function rewardDebt(address user) public view returns (uint256);
}

contract RewardLens {
    RewardPoolLike internal pool;

    constructor(RewardPoolLike rewardPool) public {
        pool = rewardPool;
    }

    function pending(address user) public view returns (uint256) {
        return pool.rewardDebt(user);
    }
}
