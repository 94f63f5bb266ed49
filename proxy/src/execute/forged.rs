//! A call that read a value the hot tier forged, found so before its
//! answer is released (an audit in its own padding rounds or free
//! queries): run again over the levels' values, with no request more.

use super::*;

impl Executor {
    /// The keys whose value `session` had from the hot tier that were
    /// found forged (by an audit of this request's or an earlier one's).
    pub(super) fn forged_reads(&self, session: &Session) -> Vec<ReadKey> {
        let view = &session.view;
        let from_tier = session.reads.from_tier.iter();
        let forged = from_tier.filter(|key| self.reader.tier_key_forged(view, key));
        forged.copied().collect()
    }

    /// Whether every value `session` had from the hot tier was audited
    /// (then a padding round that failed carried no audit it needed).
    pub(super) fn tier_reads_audited(&self, session: &Session) -> bool {
        let view = &session.view;
        let mut from_tier = session.reads.from_tier.iter();
        from_tier.all(|key| self.reader.tier_key_audited(view, key))
    }

    /// Why a request that read values its view's tier forged gives no
    /// answer.
    pub(super) fn withheld(&self, session: &Session) -> ReadError {
        let tier = session.view.hot.as_ref();
        let tier = tier
            .map(|h| h.level.entry.id.url_form())
            .unwrap_or_default();
        tracing::warn!(%tier, "a request read a value the hot tier forged: its answer is withheld");
        ReadError::TierForged { tier }
    }

    /// `args`'s result over `session`'s reads with the `forged` keys'
    /// levels' values: the EVM run once more, locally. Withheld
    /// ([`Self::withheld`]) where that run needs a read more, or a
    /// corrected account's code changes (a code not downloaded): either
    /// would change what the server sees.
    pub(super) async fn rerun_corrected(
        &self,
        session: &mut Session,
        args: &CallArgs,
        forged: &[ReadKey],
    ) -> Result<CallResult, ReadError> {
        if !self.correct_reads(session, forged) {
            return Err(self.withheld(session));
        }
        let (outcome, _, _) = self.run_once(session, args, &args.access_list).await?;
        match outcome {
            // Past the request's EVM time: geth's timeout error.
            Outcome::TimedOut => {
                session.timed_out = true;
                Ok(self.timed_out(session).expect("timed out"))
            }
            Outcome::Done(result) => {
                tracing::warn!(
                    "a call read a value the hot tier forged: answered over the levels' value"
                );
                Ok(result)
            }
            _ => Err(self.withheld(session)),
        }
    }

    /// Puts the levels' values of `forged` in `session`'s state: false
    /// where one cannot be (not readable, a wide word's low part, or an
    /// account whose code would change).
    fn correct_reads(&self, session: &mut Session, forged: &[ReadKey]) -> bool {
        for key in forged {
            let state = self.reader.corrected_state(&session.view, key);
            let known = &mut session.reads.known;
            match (key, state) {
                (ReadKey::Slot { contract, slot }, Some(KeyState::Slot(s))) if !s.low_part => {
                    known.add_slot(*contract, *slot, s.word);
                }
                (ReadKey::Account(address), Some(KeyState::Account(a))) => {
                    let Some(before) = known.account(address) else {
                        return false;
                    };
                    let facts = facts_of(&a);
                    if a.code == CodeRef::Unknown || facts.has_code != before.has_code {
                        return false;
                    }
                    known.add_account(*address, facts);
                }
                _ => return false,
            }
        }
        true
    }
}
