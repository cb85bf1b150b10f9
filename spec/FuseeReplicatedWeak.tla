------------------------- MODULE FuseeReplicatedWeak -------------------------
(***************************************************************************)
(* FuseeReplicated with deliberately weakened rules, one per              *)
(* configuration, each substituted for the rule it weakens. TLC must      *)
(* report the named invariant violated: this shows each part of the rule  *)
(* needed (spec/run-tlc requires each violation; docs/spec.md).           *)
(***************************************************************************)
EXTENDS FuseeReplicated

(* FuseeReplicatedPublishOne.cfg, for AckedNeverLost: a primary publishes  *)
(* a batch once it holds it itself, without a backup's acknowledgement.    *)
WeakPublishQuorum == 1

(* FuseeReplicatedLongest.cfg, for AckedNeverLost: a new primary takes the *)
(* longest sealed log, whatever view its last batch is from, and the seal  *)
(* answers are not cut by the view history. (With the answers cut, the    *)
(* longest log is also the one of the highest view: TLC finds no error,    *)
(* docs/spec.md.)                                                          *)
WeakBetter(s, t) == Len(s) >= Len(t)
WeakSealCut(s) == s

(* FuseeReplicatedWipedVotes.cfg, for AckedNeverLost: a replica that lost  *)
(* its directory answers a seal as an empty log.                           *)
WeakMayVote(r) == TRUE

(* FuseeReplicatedNoSeal.cfg, for AckedNeverLost: a candidate chooses its  *)
(* end from its own log alone, without sealing a majority.                 *)
WeakSealQuorum == 1
(* FuseeReplicatedDamagedVotes.cfg, for AckedNeverLost: the design note's *)
(* rule (../shared/REPLICATION.md 2.6): a replica whose recovery cut its   *)
(* log at a damaged batch answers seals like any other, trusted as far as  *)
(* the highest published sequence it was told (ackedSeen). A primary       *)
(* publishes its last batch, and that batch rots before any later batch    *)
(* could carry the news: nothing on its disk says it was published.        *)
WeakVouches(m) == TRUE
=============================================================================
