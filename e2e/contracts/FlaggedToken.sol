pragma solidity ^0.4.24;

// A FiatToken-2.2-style token (USDC's): each holder's balance word keeps a
// blacklist flag in its top bit, so the word of a blacklisted holder is
// wider than any balance and `balanceOf` masks it. Allowances may be
// unlimited (2^256 - 1). Deployed behind Proxy1967 in the tests, so its
// state lives in the proxy's storage: `initialize` sets the owner there.

contract FlaggedToken {
    address public owner;
    bool internal initialized;
    mapping(address => uint256) internal balanceAndBlacklistStates;
    mapping(address => mapping(address => uint256)) internal allowed;
    uint256 public totalSupply;

    uint256 constant FLAG = 1 << 255;

    function initialize(address newOwner) public {
        require(!initialized, "initialized");
        initialized = true;
        owner = newOwner;
    }

    function mint(address to, uint256 amount) public {
        require(msg.sender == owner, "owner only");
        balanceAndBlacklistStates[to] += amount;
        totalSupply += amount;
    }

    function blacklist(address holder) public {
        require(msg.sender == owner, "owner only");
        balanceAndBlacklistStates[holder] |= FLAG;
    }

    function isBlacklisted(address holder) public view returns (bool) {
        return balanceAndBlacklistStates[holder] & FLAG != 0;
    }

    function balanceOf(address holder) public view returns (uint256) {
        return balanceAndBlacklistStates[holder] & (FLAG - 1);
    }

    function transfer(address to, uint256 amount) public returns (bool) {
        require(!isBlacklisted(msg.sender), "Blacklistable: account is blacklisted");
        require(balanceOf(msg.sender) >= amount, "ERC20: transfer amount exceeds balance");
        balanceAndBlacklistStates[msg.sender] -= amount;
        balanceAndBlacklistStates[to] += amount;
        return true;
    }

    function approve(address spender, uint256 amount) public returns (bool) {
        allowed[msg.sender][spender] = amount;
        return true;
    }

    function allowance(address holder, address spender) public view returns (uint256) {
        return allowed[holder][spender];
    }
}
