pragma solidity ^0.4.24;

// A quoter's shape: it calls another contract and measures the gas the
// call took with gasleft() around it (Uniswap's QuoterV2 reports such a
// figure beside its amounts). An answer made with the inner call taken
// from elsewhere would carry another figure than the node's.

contract GasQuoter {
    function quote(address target, bytes data) public returns (bool ok, uint256 used) {
        uint256 before = gasleft();
        ok = target.call(data);
        used = before - gasleft();
    }
}
