//! `tokens detect`: where an ERC-20 keeps its balances (or a contract the
//! answers of another getter `f(address) returns (uint256)`, such as a
//! staking pool's `getShares`), found by asking a node. A getter can be
//! exported and read privately only if `f(holder)` is a storage word the
//! snapshot holds: the holder's entry of a mapping. This compares `f` of
//! holders that have a balance with every candidate entry (mapping slot indices `0..=max_index`
//! in Solidity's and Vyper's layouts, and OpenZeppelin's ERC-7201 ERC-20
//! namespace) and keeps the candidates every holder agrees with. None left:
//! the token is not a plain mapping (a rebasing token that stores shares, a
//! balance packed with flags, a proxy delegating to another contract's
//! storage), and it is said so rather than guessed.

use alloy_primitives::{Address, B256, U256};
use protocol::tokens::{
    erc7201_base, Getter, MappingLayout, SlotIndex, TokenEntry, OPENZEPPELIN_ERC20_NAMESPACE,
};

use crate::sources::rpc::{RpcSource, RpcSourceError};

/// How hard to look.
#[derive(Clone, Debug)]
pub struct DetectOptions {
    /// Holders to check; when empty, recipients of the token's recent
    /// `Transfer` events.
    pub holders: Vec<Address>,
    /// Blocks of `Transfer` events searched for holders (ending at the head).
    pub log_window: u64,
    /// Highest plain slot index tried.
    pub max_index: u64,
    /// Holders with a balance that must agree (more only cost time).
    pub confirmations: usize,
    /// The getter compared (`balanceOf(address)` by default).
    pub function: Getter,
}

impl Default for DetectOptions {
    fn default() -> Self {
        DetectOptions {
            holders: Vec::new(),
            log_window: 10_000,
            max_index: 255,
            confirmations: 3,
            function: Getter::balance_of(),
        }
    }
}

/// What detection found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Detection {
    /// Balances are the mapping at `index` in `layout`: every checked
    /// holder's answer equals its entry there, and no other candidate.
    Plain {
        function: Getter,
        index: SlotIndex,
        layout: MappingLayout,
        block: u64,
        /// The holders checked and their balances.
        holders: Vec<(Address, U256)>,
    },
    /// No candidate holds the balances: the token cannot be read from a
    /// mapping (say why in words for the operator).
    NonStandard { reason: String, block: u64 },
}

/// Why detection could not decide.
#[derive(Debug, thiserror::Error)]
pub enum DetectError {
    #[error(transparent)]
    Node(#[from] RpcSourceError),
    #[error("{0} has no code at block {1}: not a token contract")]
    NotAContract(Address, u64),
    #[error("{function} on {token} returned {bytes} bytes, not one uint256")]
    NotUint {
        token: Address,
        function: Getter,
        bytes: usize,
    },
    #[error(
        "no holder with a non-zero balance of {token} (checked {checked}); pass --holder ADDRESS"
    )]
    NoHolder { token: Address, checked: usize },
    #[error("holders' balances fit {0} candidate slots; pass more --holder addresses with different balances")]
    Ambiguous(usize),
}

/// One place balances may live.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Candidate {
    index: SlotIndex,
    layout: MappingLayout,
}

fn candidates(max_index: u64) -> Vec<Candidate> {
    let namespaced = SlotIndex::Word(erc7201_base(OPENZEPPELIN_ERC20_NAMESPACE));
    (0..=max_index)
        .map(SlotIndex::Position)
        .chain([namespaced])
        .flat_map(|index| MappingLayout::ALL.map(|layout| Candidate { index, layout }))
        .collect()
}

/// Finds where `token` keeps its balances, at the node's head.
pub async fn detect(
    source: &RpcSource,
    token: Address,
    options: &DetectOptions,
) -> Result<Detection, DetectError> {
    let block = source.head().await?;
    if source.code_size(token, block).await? == 0 {
        return Err(DetectError::NotAContract(token, block));
    }
    let mut holders = options.holders.clone();
    if holders.is_empty() {
        let from = block.saturating_sub(options.log_window.saturating_sub(1));
        holders = source.transfer_recipients(token, from, block).await?;
    }
    let mut checked = 0usize;
    let mut agreed: Vec<(Address, U256)> = Vec::new();
    let mut remaining = candidates(options.max_index);
    for holder in holders {
        if agreed.len() >= options.confirmations.max(1) || remaining.is_empty() {
            break;
        }
        checked += 1;
        let balance = ask(source, token, &options.function, holder, block).await?;
        if balance.is_zero() {
            continue;
        }
        let slots: Vec<B256> = remaining
            .iter()
            .map(|c| c.layout.slot(&holder, &c.index))
            .collect();
        let words = source.storage(token, &slots, block).await?;
        let expected = B256::from(balance);
        remaining = remaining
            .into_iter()
            .zip(words)
            .filter(|(_, word)| *word == expected)
            .map(|(c, _)| c)
            .collect();
        agreed.push((holder, balance));
    }
    if agreed.is_empty() {
        return Err(DetectError::NoHolder { token, checked });
    }
    conclude(&remaining, agreed, options, block)
}

/// The detection the candidates left after every holder say.
fn conclude(
    remaining: &[Candidate],
    agreed: Vec<(Address, U256)>,
    options: &DetectOptions,
    block: u64,
) -> Result<Detection, DetectError> {
    match remaining {
        [only] => Ok(Detection::Plain {
            function: options.function.clone(),
            index: only.index,
            layout: only.layout,
            block,
            holders: agreed,
        }),
        [] => Ok(Detection::NonStandard {
            reason: format!(
                "no mapping entry holds {} of {} (slot indices 0..={} in the Solidity and \
                 Vyper layouts, and the ERC-7201 namespace {OPENZEPPELIN_ERC20_NAMESPACE}): the token \
                 computes balances (rebasing, shares), packs them with other data, or keeps them \
                 in another contract",
                options.function, agreed[0].0, options.max_index
            ),
            block,
        }),
        several => Err(DetectError::Ambiguous(several.len())),
    }
}

/// `function(holder)` of `token` at `block`.
async fn ask(
    source: &RpcSource,
    token: Address,
    function: &Getter,
    holder: Address,
    block: u64,
) -> Result<U256, DetectError> {
    let data = function.calldata(&holder);
    let out = source.call(token, data.into(), block).await?;
    if out.len() != 32 {
        return Err(DetectError::NotUint {
            token,
            function: function.clone(),
            bytes: out.len(),
        });
    }
    Ok(U256::from_be_slice(&out))
}

impl Detection {
    /// The token list entry for a plain detection.
    pub fn entry(&self, chain_id: u64, token: Address, symbol: &str) -> Option<TokenEntry> {
        match self {
            Detection::Plain {
                function,
                index,
                layout,
                block,
                holders,
            } => Some(TokenEntry {
                chain_id,
                address: token,
                symbol: symbol.to_string(),
                function: function.clone(),
                balance_slot: *index,
                layout: *layout,
                source: format!(
                    "ethpir-snapshot tokens detect at block {block}: {function} of {} holder(s) \
                     equals their entry",
                    holders.len()
                ),
            }),
            Detection::NonStandard { .. } => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn candidates_cover_both_layouts_and_the_namespace() {
        let all = candidates(3);
        assert_eq!(all.len(), 2 * 5);
        assert!(all.contains(&Candidate {
            index: SlotIndex::Position(0),
            layout: MappingLayout::Vyper
        }));
        assert!(all.iter().any(|c| matches!(c.index, SlotIndex::Word(_))));
    }
}
