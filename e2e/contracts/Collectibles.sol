pragma solidity ^0.4.24;

// An ERC-721-style collection: `ownerOf(id)` (reverting for a token that
// does not exist, as OpenZeppelin's) and `balanceOf(owner)`.

contract Collectibles {
    address public minter;
    mapping(uint256 => address) internal owners;
    mapping(address => uint256) internal counts;

    constructor() public {
        minter = msg.sender;
    }

    function mint(address to, uint256 id) public {
        require(msg.sender == minter, "minter only");
        require(owners[id] == address(0), "ERC721: token already minted");
        owners[id] = to;
        counts[to] += 1;
    }

    function ownerOf(uint256 id) public view returns (address) {
        address holder = owners[id];
        require(holder != address(0), "ERC721: invalid token ID");
        return holder;
    }

    function balanceOf(address holder) public view returns (uint256) {
        require(holder != address(0), "ERC721: address zero is not a valid owner");
        return counts[holder];
    }
}
