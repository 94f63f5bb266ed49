pragma solidity ^0.4.24;

// A factory that creates plain ERC-20 tokens (a token created after a
// snapshot's base: its storage is held from its first block).

contract SimpleToken {
    mapping(address => uint256) public balanceOf;
    mapping(address => mapping(address => uint256)) public allowance;
    uint256 public totalSupply;

    constructor(address holder, uint256 supply) public {
        balanceOf[holder] = supply;
        totalSupply = supply;
    }

    function transfer(address to, uint256 amount) public returns (bool) {
        require(balanceOf[msg.sender] >= amount, "balance");
        balanceOf[msg.sender] -= amount;
        balanceOf[to] += amount;
        return true;
    }

    function approve(address spender, uint256 amount) public returns (bool) {
        allowance[msg.sender][spender] = amount;
        return true;
    }

    function transferFrom(address from, address to, uint256 amount) public returns (bool) {
        require(balanceOf[from] >= amount, "balance");
        require(allowance[from][msg.sender] >= amount, "allowance");
        allowance[from][msg.sender] -= amount;
        balanceOf[from] -= amount;
        balanceOf[to] += amount;
        return true;
    }
}

contract TokenFactory {
    address[] public tokens;

    function create(uint256 supply) public returns (address token) {
        token = new SimpleToken(msg.sender, supply);
        tokens.push(token);
    }
}
