---------------------------- MODULE FuseeLogWeak ----------------------------
(***************************************************************************)
(* FuseeLog with deliberately weakened recovery rules, one per             *)
(* configuration, each substituted for the rule it weakens. TLC must       *)
(* report that the named invariant is violated: this shows each check able *)
(* to fail. `make spec` requires each violation (spec/run-tlc).            *)
(***************************************************************************)
EXTENDS FuseeLog

(* FuseeLogWeak.cfg, for AckedInRecoveredLog (1): the scan past the        *)
(* chain's end ignores `acked`, so recovery never refuses for a valid      *)
(* batch past the end. Bit rot in an acknowledged batch shortens the       *)
(* chain, and the weakened rule drops the acknowledged batches after it    *)
(* without a word.                                                         *)
WeakPastEndRefuses(d, endSeg, endSlot, last) == FALSE

(* FuseeLogNoChecksum.cfg, for ChainChecksummed (5): probe() accepts a     *)
(* batch whose header decodes with the expected sequence and prev_crc      *)
(* without checking its CRC. A crash tears a write after its header        *)
(* landed, and the weakened rule keeps the torn batch in the chain. None   *)
(* of invariants (1) to (4) notices: the torn batch was sealed by this     *)
(* life, in sequence, and nothing acknowledged is lost.                    *)
WeakContinues(d, s, i, expSeq, expPrev) ==
  /\ Decodes(d, s, i)
  /\ d[s].slots[i].sequence = expSeq
  /\ d[s].slots[i].prev = expPrev

(* FuseeLogNoMarkerCheck.cfg, for AckedInRecoveredLog (1) again: a roll    *)
(* marker whose next segment is missing, unreadable, cut short or does not *)
(* continue the chain ends the chain like a torn tail instead of refusing. *)
(* Only damage to segment files (RotHeader, LoseSegment, TruncateSegment)  *)
(* reaches this branch: it shows the damage model covers it.               *)
WeakRefuseAtMarker == FALSE

(* FuseeLogRetireSkips.cfg, for NoRefusalWithoutDamage (3): Log::retire as *)
(* it was before ed818e5. The segment had left read_segments_ before its   *)
(* header was zeroed and its file removed, and a failed step forgot it, so *)
(* the next call retired the segment after it: segment 1 valid or zeroed,  *)
(* segment 2 zeroed or gone. Recovery refuses at segment 1's roll marker,  *)
(* or for the gap, with nothing damaged.                                   *)
WeakKeepRetiring(s) == 0

=============================================================================
