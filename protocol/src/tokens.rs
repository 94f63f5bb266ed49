//! ERC-20 tokens whose balances can be read from storage: the `balanceOf`
//! ABI (alloy's `sol!`), where a compiler puts a holder's entry of a
//! `mapping(address => uint256)`, and the token list (which contracts, and
//! at which mapping their balances live) that the snapshotter exports and
//! the proxy answers from. One home for all three: the snapshotter's
//! `tokens detect` writes list entries, every other program reads them.

#[cfg(feature = "config")]
use std::path::Path;

use alloy_primitives::{keccak256, Address, B256, U256};
use serde::{Deserialize, Serialize};

alloy_sol_types::sol! {
    /// The part of ERC-20 that balance reads use.
    interface IERC20 {
        function balanceOf(address holder) external view returns (uint256);
        event Transfer(address indexed from, address indexed to, uint256 value);
    }
}

alloy_sol_types::sol! {
    /// Multicall3's batching calls and views that wallets send balance
    /// reads through.
    interface IMulticall3 {
        struct Call {
            address target;
            bytes callData;
        }
        struct Call3 {
            address target;
            bool allowFailure;
            bytes callData;
        }
        struct Call3Value {
            address target;
            bool allowFailure;
            uint256 value;
            bytes callData;
        }
        struct Result {
            bool success;
            bytes returnData;
        }
        function aggregate(Call[] calldata calls) external payable returns (uint256 blockNumber, bytes[] memory returnData);
        function aggregate3(Call3[] calldata calls) external payable returns (Result[] memory returnData);
        function aggregate3Value(Call3Value[] calldata calls) external payable returns (Result[] memory returnData);
        function blockAndAggregate(Call[] calldata calls) external payable returns (uint256 blockNumber, bytes32 blockHash, Result[] memory returnData);
        function tryAggregate(bool requireSuccess, Call[] calldata calls) external payable returns (Result[] memory returnData);
        function tryBlockAndAggregate(bool requireSuccess, Call[] calldata calls) external payable returns (uint256 blockNumber, bytes32 blockHash, Result[] memory returnData);
        function getEthBalance(address addr) external view returns (uint256 balance);
        function getBlockNumber() external view returns (uint256 blockNumber);
        function getChainId() external view returns (uint256 chainid);
        function getCurrentBlockTimestamp() external view returns (uint256 timestamp);
    }
}

alloy_sol_types::sol! {
    /// The balance checker MetaMask's token detection calls: entry
    /// `j + tokens.length * i` is user i's balance of token j (the zero
    /// address: ETH; a token without code, or whose `balanceOf` fails: 0).
    interface IBalanceChecker {
        function balances(address[] users, address[] tokens) external view returns (uint256[] memory);
    }
}

/// MetaMask's BalanceChecker on Ethereum mainnet.
pub const MAINNET_BALANCE_CHECKER: Address =
    alloy_primitives::address!("0xb1f8e55c7f64d203c1400b9d8555d050f94adf39");

/// The BalanceChecker wallets call on `chain_id`, where one is known.
pub fn known_balance_checker(chain_id: u64) -> Option<Address> {
    (chain_id == 1).then_some(MAINNET_BALANCE_CHECKER)
}

/// Where Multicall3 lives on every chain it is deployed on (the same
/// address everywhere, from a presigned deployment).
pub const MULTICALL3: Address =
    alloy_primitives::address!("0xcA11bde05977b3631167028862bE2a173976CA11");

/// How a compiler lays out the entry of `key` in a mapping whose slot
/// index is `index`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MappingLayout {
    /// Solidity: `keccak256(pad32(key) || index)`.
    Solidity,
    /// Vyper: `keccak256(index || pad32(key))`.
    Vyper,
}

impl MappingLayout {
    pub const ALL: [MappingLayout; 2] = [MappingLayout::Solidity, MappingLayout::Vyper];

    pub fn name(self) -> &'static str {
        match self {
            MappingLayout::Solidity => "solidity",
            MappingLayout::Vyper => "vyper",
        }
    }

    /// The storage slot of `holder`'s entry in the mapping at `index`.
    pub fn slot(self, holder: &Address, index: &SlotIndex) -> B256 {
        let mut input = [0u8; 64];
        let (key_at, index_at) = match self {
            MappingLayout::Solidity => (0, 32),
            MappingLayout::Vyper => (32, 0),
        };
        input[key_at + 12..key_at + 32].copy_from_slice(holder.as_slice());
        input[index_at..index_at + 32].copy_from_slice(index.word().as_slice());
        keccak256(input)
    }
}

/// The slot index of a mapping: a small number (a plain state variable's
/// position) or a 32-byte word (a namespaced layout's base, ERC-7201).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(untagged)]
pub enum SlotIndex {
    Position(u64),
    Word(B256),
}

impl SlotIndex {
    /// The index as the 32-byte word the slot hash takes.
    pub fn word(&self) -> B256 {
        match self {
            SlotIndex::Position(p) => B256::from(U256::from(*p)),
            SlotIndex::Word(w) => *w,
        }
    }
}

impl std::fmt::Display for SlotIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SlotIndex::Position(p) => write!(f, "{p}"),
            SlotIndex::Word(w) => write!(f, "{w}"),
        }
    }
}

/// The base slot of an ERC-7201 namespace:
/// `keccak256(keccak256(id) - 1) & ~0xff`.
pub fn erc7201_base(id: &str) -> B256 {
    let inner = U256::from_be_bytes(keccak256(id.as_bytes()).0) - U256::from(1u8);
    let mut base = keccak256(inner.to_be_bytes::<32>());
    base.0[31] = 0;
    base
}

/// OpenZeppelin's upgradeable ERC-20 (v5) keeps its balances mapping first
/// in this namespace.
pub const OPENZEPPELIN_ERC20_NAMESPACE: &str = "openzeppelin.storage.ERC20";

/// A getter `name(address) returns (uint256)` whose answer is the
/// address's entry of a mapping: `balanceOf(address)` by default, or
/// another (a staking pool's `getShares(address)`). A validated type: an
/// identifier, then exactly `(address)`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Getter(String);

/// Why a string is not a [`Getter`] signature.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("not a getter signature of the form name(address): {0:?}")]
pub struct GetterError(pub String);

impl Getter {
    pub const BALANCE_OF: &'static str = "balanceOf(address)";

    pub fn balance_of() -> Self {
        Getter(Self::BALANCE_OF.to_string())
    }

    pub fn is_balance_of(&self) -> bool {
        self.0 == Self::BALANCE_OF
    }

    /// The function's 4-byte selector.
    pub fn selector(&self) -> [u8; 4] {
        let hash = keccak256(self.0.as_bytes());
        [hash[0], hash[1], hash[2], hash[3]]
    }

    /// The canonical calldata of `getter(holder)`.
    pub fn calldata(&self, holder: &Address) -> Vec<u8> {
        let mut data = Vec::with_capacity(36);
        data.extend_from_slice(&self.selector());
        data.extend_from_slice(&[0u8; 12]);
        data.extend_from_slice(holder.as_slice());
        data
    }

    /// The holder `data` asks about, when `data` is exactly this getter's
    /// canonical calldata (a call with trailing bytes or dirty padding
    /// runs the same code, but is not what a wallet sends).
    pub fn holder_in(&self, data: &[u8]) -> Option<Address> {
        let holder = Address::from_slice(data.get(16..36)?);
        (data.len() == 36 && data[..4] == self.selector() && data[4..16] == [0u8; 12])
            .then_some(holder)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl Default for Getter {
    fn default() -> Self {
        Getter::balance_of()
    }
}

impl TryFrom<String> for Getter {
    type Error = GetterError;
    fn try_from(s: String) -> Result<Self, GetterError> {
        let name = s.strip_suffix("(address)").unwrap_or_default();
        let ident = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '$';
        let ok = !name.is_empty()
            && name.len() <= 64
            && !name.starts_with(|c: char| c.is_ascii_digit())
            && name.chars().all(ident);
        match ok {
            true => Ok(Getter(s)),
            false => Err(GetterError(s)),
        }
    }
}

impl std::str::FromStr for Getter {
    type Err = GetterError;
    fn from_str(s: &str) -> Result<Self, GetterError> {
        Getter::try_from(s.to_string())
    }
}

impl From<Getter> for String {
    fn from(g: Getter) -> String {
        g.0
    }
}

impl std::fmt::Display for Getter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// One listed getter of a contract (a token's `balanceOf`, by default).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenEntry {
    pub chain_id: u64,
    pub address: Address,
    /// Its symbol, for people reading the list (not checked).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub symbol: String,
    /// The getter answered from the mapping (`balanceOf(address)` when
    /// not given).
    #[serde(default, skip_serializing_if = "Getter::is_balance_of")]
    pub function: Getter,
    /// Where the getter's answer comes from: the mapping's slot index...
    pub balance_slot: SlotIndex,
    /// ...and its layout.
    pub layout: MappingLayout,
    /// How the slot was established (a `tokens detect` run, a verified
    /// source's storage layout).
    pub source: String,
}

impl TokenEntry {
    /// The storage slot holding `holder`'s balance.
    pub fn balance_slot_of(&self, holder: &Address) -> B256 {
        self.layout.slot(holder, &self.balance_slot)
    }
}

/// A token list file: `[[token]]` tables (a getter backed by a mapping:
/// its keys are known before the call runs) and `[[contract]]` tables
/// (a contract whose whole storage the snapshots export, of any layout:
/// the proxy runs its code).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenList {
    #[serde(default, rename = "token")]
    pub tokens: Vec<TokenEntry>,
    #[serde(default, rename = "contract", skip_serializing_if = "Vec::is_empty")]
    pub contracts: Vec<ContractEntry>,
}

/// A contract listed whole: no slot, no layout.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ContractEntry {
    pub chain_id: u64,
    pub address: Address,
    #[serde(default)]
    pub symbol: String,
    /// Why it is listed, and its storage's size when measured.
    #[serde(default)]
    pub source: String,
}

/// The shipped mainnet list's text.
#[cfg(feature = "config")]
const SHIPPED_MAINNET: &str = include_str!("../../configs/tokens-mainnet.toml");

/// A token list that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TokenListError {
    #[cfg(feature = "config")]
    #[error(transparent)]
    Load(#[from] crate::config::ConfigError),
    #[error("{function} of {address} on chain {chain_id} is listed twice")]
    Duplicate {
        chain_id: u64,
        address: Address,
        function: Getter,
    },
    #[error("contract {address} on chain {chain_id} is listed twice")]
    DuplicateContract { chain_id: u64, address: Address },
}

impl TokenList {
    /// Reads a list, refusing unknown fields and a token listed twice.
    #[cfg(feature = "config")]
    pub fn from_file(path: &Path) -> Result<Self, TokenListError> {
        let list: TokenList = crate::config::load_toml(path)?;
        list.check()?;
        Ok(list)
    }

    #[cfg(any(feature = "config", test))]
    fn check(&self) -> Result<(), TokenListError> {
        let mut seen = std::collections::BTreeSet::new();
        for t in &self.tokens {
            if !seen.insert((t.chain_id, t.address, t.function.selector())) {
                return Err(TokenListError::Duplicate {
                    chain_id: t.chain_id,
                    address: t.address,
                    function: t.function.clone(),
                });
            }
        }
        let mut contracts = std::collections::BTreeSet::new();
        for c in &self.contracts {
            if !contracts.insert((c.chain_id, c.address)) {
                return Err(TokenListError::DuplicateContract {
                    chain_id: c.chain_id,
                    address: c.address,
                });
            }
        }
        Ok(())
    }

    /// The contracts listed whole on `chain_id`.
    pub fn contracts_of(&self, chain_id: u64) -> Vec<Address> {
        self.contracts
            .iter()
            .filter(|c| c.chain_id == chain_id)
            .map(|c| c.address)
            .collect()
    }

    /// The list's `balanceOf` entry for `address` on `chain_id`.
    pub fn get(&self, chain_id: u64, address: &Address) -> Option<&TokenEntry> {
        self.getter(chain_id, address, Getter::balance_of().selector())
    }

    /// The list's entry for the getter `selector` of `address` on
    /// `chain_id`.
    pub fn getter(
        &self,
        chain_id: u64,
        address: &Address,
        selector: [u8; 4],
    ) -> Option<&TokenEntry> {
        self.tokens.iter().find(|t| {
            t.chain_id == chain_id && &t.address == address && t.function.selector() == selector
        })
    }

    #[cfg(feature = "config")]
    /// The list shipped with the programs (`configs/tokens-mainnet.toml`,
    /// built in): the tokens a proxy trusts when its user gives no list.
    pub fn shipped() -> Self {
        let list: TokenList = toml::from_str(SHIPPED_MAINNET).expect("the shipped list parses");
        list.check().expect("the shipped list has no duplicates");
        list
    }

    #[cfg(feature = "config")]
    /// The list as TOML (what `tokens detect` prints one entry of).
    pub fn to_toml(&self) -> String {
        toml::to_string(self).expect("a token list serialises")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloy_primitives::{address, b256};

    #[cfg(feature = "config")]
    #[test]
    fn the_built_in_list_is_the_shipped_file() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../configs/tokens-mainnet.toml"
        );
        assert_eq!(
            TokenList::shipped(),
            TokenList::from_file(Path::new(path)).unwrap()
        );
    }

    #[cfg(feature = "config")]
    #[test]
    fn the_shipped_mainnet_list_loads() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../configs/tokens-mainnet.toml"
        );
        let list = TokenList::from_file(Path::new(path)).unwrap();
        assert!(list.tokens.len() >= 3);
        assert!(list
            .tokens
            .iter()
            .all(|t| t.chain_id == 1 && !t.source.is_empty()));
        let weth = list
            .get(1, &address!("0xC02aaA39b223FE8D0A0e5C4F27eAD9083C756Cc2"))
            .unwrap();
        assert_eq!(weth.balance_slot, SlotIndex::Position(3));
        // Listed whole: the contracts no slot reads (issue 44).
        for whole in [
            address!("0xA0b86991c6218b36c1d19D4a2e9Eb0cE3606eB48"),
            address!("0xae7ab96520DE3A18E5e111B5EaAb095312D7fE84"),
            address!("0xb8FFC3Cd6e7Cf5a098A1c92F48009765B24088Dc"),
            address!("0x7f39C581F595B53c5cb19bD0b3f8dA6c935E2Ca0"),
            address!("0x4fef9d741011476750a243ac70b9789a63dd47df"),
        ] {
            assert!(list.contracts_of(1).contains(&whole), "{whole}");
        }
        assert!(list.contracts.iter().all(|c| !c.source.is_empty()));
    }
    use alloy_sol_types::SolCall;

    #[test]
    fn balance_of_calldata_is_the_erc20_selector() {
        let holder = address!("00000000000000000000000000000000000000aa");
        let data = IERC20::balanceOfCall { holder }.abi_encode();
        assert_eq!(data[..4], [0x70, 0xa0, 0x82, 0x31]);
        assert_eq!(data.len(), 36);
        assert_eq!(data[16..36], holder.0);
    }

    /// Slots against the layout rules written out by hand.
    #[test]
    fn mapping_slots_follow_each_compiler() {
        let holder = address!("1111111111111111111111111111111111111111");
        let mut solidity = [0u8; 64];
        solidity[12..32].copy_from_slice(holder.as_slice());
        solidity[63] = 3;
        assert_eq!(
            MappingLayout::Solidity.slot(&holder, &SlotIndex::Position(3)),
            keccak256(solidity)
        );
        let mut vyper = [0u8; 64];
        vyper[31] = 3;
        vyper[44..64].copy_from_slice(holder.as_slice());
        assert_eq!(
            MappingLayout::Vyper.slot(&holder, &SlotIndex::Position(3)),
            keccak256(vyper)
        );
    }

    /// ERC-7201's own example and OpenZeppelin's published ERC-20 location.
    #[test]
    fn erc7201_bases_match_the_published_ones() {
        assert_eq!(
            erc7201_base("example.main"),
            b256!("183a6125c38840424c4a85fa12bab2ab606c4b6d0e7cc73c0c06ba5300eab500")
        );
        assert_eq!(
            erc7201_base(OPENZEPPELIN_ERC20_NAMESPACE),
            b256!("52c63247e1f47db19d5ce0460030c497f067ca4cebf71ba98eeadabe20bace00")
        );
    }

    #[cfg(feature = "config")]
    #[test]
    fn lists_round_trip_and_refuse_duplicates_and_unknown_fields() {
        let entry = TokenEntry {
            chain_id: 1,
            address: address!("c02aaa39b223fe8d0a0e5c4f27ead9083c756cc2"),
            symbol: "WETH".into(),
            function: Default::default(),
            balance_slot: SlotIndex::Position(3),
            layout: MappingLayout::Solidity,
            source: "test".into(),
        };
        let namespaced = TokenEntry {
            address: Address::repeat_byte(7),
            function: Default::default(),
            balance_slot: SlotIndex::Word(erc7201_base(OPENZEPPELIN_ERC20_NAMESPACE)),
            ..entry.clone()
        };
        let usdc = ContractEntry {
            chain_id: 1,
            address: address!("a0b86991c6218b36c1d19d4a2e9eb0ce3606eb48"),
            symbol: "USDC".into(),
            source: "test".into(),
        };
        let list = TokenList {
            tokens: vec![entry.clone(), namespaced],
            contracts: vec![usdc.clone()],
        };
        let text = list.to_toml();
        assert!(text.contains("[[contract]]"), "{text}");
        let back: TokenList = toml::from_str(&text).unwrap();
        assert_eq!(back, list);
        assert!(back.get(1, &entry.address).is_some());
        assert!(back.get(5, &entry.address).is_none());
        assert_eq!(back.contracts_of(1), vec![usdc.address]);
        assert!(back.contracts_of(5).is_empty());

        let dir = std::env::temp_dir().join(format!("ethpir-tokens-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let twice = dir.join("twice.toml");
        let doubled = TokenList {
            tokens: vec![entry.clone(), entry.clone()],
            contracts: Vec::new(),
        };
        std::fs::write(&twice, doubled.to_toml()).unwrap();
        assert!(matches!(
            TokenList::from_file(&twice),
            Err(TokenListError::Duplicate { chain_id: 1, .. })
        ));
        let twice_whole = TokenList {
            tokens: Vec::new(),
            contracts: vec![usdc.clone(), usdc],
        };
        std::fs::write(&twice, twice_whole.to_toml()).unwrap();
        assert!(matches!(
            TokenList::from_file(&twice),
            Err(TokenListError::DuplicateContract { chain_id: 1, .. })
        ));
        let unknown = dir.join("unknown.toml");
        std::fs::write(&unknown, text.replace("layout", "layuot")).unwrap();
        assert!(TokenList::from_file(&unknown).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
