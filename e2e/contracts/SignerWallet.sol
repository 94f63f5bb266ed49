pragma solidity ^0.4.24;

// A contract wallet's signature check in a Safe's shape (ERC-1271): its
// owners in a mapping, a threshold and a nonce in its own storage, and
// isValidSignature(hash, signature), the magic value 0x1626ba7e when the
// signature recovers one of its owners. What a sign-in page asks of it
// through viem's verifyMessage (ERC-6492's validator, created in an
// eth_call).

contract SignerWallet {
    mapping(address => bool) public isOwner;
    uint256 public threshold;
    uint256 public nonce;

    constructor(address owner) public {
        isOwner[owner] = true;
        threshold = 1;
    }

    function isValidSignature(bytes32 hash, bytes signature) public view returns (bytes4) {
        if (signature.length != 65) {
            return 0xffffffff;
        }
        bytes32 r;
        bytes32 s;
        uint8 v;
        assembly {
            r := mload(add(signature, 32))
            s := mload(add(signature, 64))
            v := byte(0, mload(add(signature, 96)))
        }
        if (v < 27) {
            v += 27;
        }
        address signer = ecrecover(hash, v, r, s);
        if (signer != address(0) && isOwner[signer] && threshold == 1) {
            return 0x1626ba7e;
        }
        return 0xffffffff;
    }
}
