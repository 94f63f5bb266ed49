pragma solidity ^0.4.24;

// A balance checker with the interface and semantics of the one MetaMask's
// token detection calls (`balances(address[],address[])`, selector
// 0xf0002ea9): for user i and token j, entry j + tokens.length * i of the
// result is the user's ETH balance when the token is the zero address,
// else the token's `balanceOf(user)` when the token has code and the call
// succeeds, else 0. Written for the proxy's end-to-end tests.

contract ERC20Balance {
    function balanceOf(address holder) public view returns (uint256);
}

contract BalanceChecker {
    function () public payable {
        revert("no payments");
    }

    function tokenBalance(address user, address token) public view returns (uint256) {
        uint256 size;
        assembly { size := extcodesize(token) }
        if (size == 0) {
            return 0;
        }
        if (!token.call(bytes4(0x70a08231), user)) {
            return 0;
        }
        return ERC20Balance(token).balanceOf(user);
    }

    function balances(address[] users, address[] tokens) external view returns (uint256[]) {
        uint256[] memory out = new uint256[](users.length * tokens.length);
        for (uint256 i = 0; i < users.length; i++) {
            for (uint256 j = 0; j < tokens.length; j++) {
                uint256 at = j + tokens.length * i;
                if (tokens[j] == address(0)) {
                    out[at] = users[i].balance;
                } else {
                    out[at] = tokenBalance(users[i], tokens[j]);
                }
            }
        }
        return out;
    }
}
