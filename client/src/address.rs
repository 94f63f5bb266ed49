//! Addresses as wallets and files write them.

use alloy_primitives::Address;

/// A 20-byte hex address (any case; a mixed-case one must carry a valid
/// EIP-55 checksum, which alloy's `Address` parser alone does not check).
pub fn parse_address(s: &str) -> Result<Address, String> {
    let hex = s
        .strip_prefix("0x")
        .ok_or_else(|| format!("invalid address '{s}': missing 0x"))?;
    if hex.len() != 40 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(format!("invalid address '{s}': need 40 hex digits"));
    }
    let address: Address = s.parse().map_err(|_| format!("invalid address '{s}'"))?;
    let mixed =
        hex.bytes().any(|b| b.is_ascii_lowercase()) && hex.bytes().any(|b| b.is_ascii_uppercase());
    if mixed && address.to_checksum(None) != s {
        return Err(format!("invalid address '{s}': bad EIP-55 checksum"));
    }
    Ok(address)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses() {
        assert!(parse_address("0x000d836201318ec6899a67540690382780743280").is_ok());
        assert!(parse_address("0x000D836201318EC6899A67540690382780743280").is_ok());
        assert!(parse_address("0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed").is_ok());
        assert!(parse_address("0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAeD").is_err());
        for bad in [
            "",
            "0x",
            "000d836201318ec6899a67540690382780743280",
            "0x000d83620131",
            "0xzz0d836201318ec6899a67540690382780743280",
        ] {
            assert!(parse_address(bad).is_err(), "{bad}");
        }
    }
}
