pragma solidity ^0.4.24;

// A router in front of pools: swaps ETH for a token through a pool with a
// minimum out and a deadline, and quotes (a wallet's swap: eth_call,
// eth_estimateGas and eth_createAccessList of swapExactETHForTokens).

interface IRouterPool {
    function getReserves() external view returns (uint256, uint256);
    function amountOut(uint256 amountIn) external view returns (uint256);
    function swapEthForTokens(address to) external payable returns (uint256);
}

contract Router {
    uint256 public swaps;

    function quote(address pool, uint256 amountIn) public view returns (uint256) {
        return IRouterPool(pool).amountOut(amountIn);
    }

    function swapExactETHForTokens(address pool, uint256 minOut, address to, uint256 deadline)
        public payable returns (uint256 out)
    {
        require(now <= deadline, "expired");
        (uint256 reserveEth, ) = IRouterPool(pool).getReserves();
        require(reserveEth > 0, "empty pool");
        out = IRouterPool(pool).swapEthForTokens.value(msg.value)(to);
        require(out >= minOut, "slippage");
        swaps += 1;
    }
}
