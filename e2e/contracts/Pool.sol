pragma solidity ^0.4.24;

// A constant-product pool of ETH and one token (Uniswap V2's formula,
// 0.3 % fee): reserves in storage, the token paid out by its transfer.

interface IPoolToken {
    function transfer(address to, uint256 amount) external returns (bool);
    function transferFrom(address from, address to, uint256 amount) external returns (bool);
}

contract Pool {
    address public token;
    uint256 public reserveEth;
    uint256 public reserveToken;

    constructor(address poolToken) public {
        token = poolToken;
    }

    function addLiquidity(uint256 amount) public payable {
        require(IPoolToken(token).transferFrom(msg.sender, this, amount), "transferFrom");
        reserveEth += msg.value;
        reserveToken += amount;
    }

    function getReserves() public view returns (uint256, uint256) {
        return (reserveEth, reserveToken);
    }

    function amountOut(uint256 amountIn) public view returns (uint256) {
        uint256 inWithFee = amountIn * 997;
        return inWithFee * reserveToken / (reserveEth * 1000 + inWithFee);
    }

    function swapEthForTokens(address to) public payable returns (uint256 out) {
        out = amountOut(msg.value);
        require(out > 0 && out < reserveToken, "liquidity");
        reserveEth += msg.value;
        reserveToken -= out;
        require(IPoolToken(token).transfer(to, out), "transfer");
    }
}
