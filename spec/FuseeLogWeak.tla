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

(* FuseeLogPublishOrder.cfg, for CheckpointAcked (6): complete() moves     *)
(* published_sequence_ to the write that completed, ahead of an earlier    *)
(* write still in flight; acknowledgement stays in order. The checkpointer *)
(* then covers a sequence that was never acknowledged (and that a crash    *)
(* may lose): five states, two seals, the second write done first, a      *)
(* checkpoint. No other invariant notices: nothing acknowledged is lost.   *)
WeakPublishTo(marked, n, k) ==
  LET done == marked[k].batch.sequence
      inOrder == IF n = 0 THEN published ELSE marked[n].batch.sequence
  IN IF done > inOrder THEN done ELSE inOrder

(* FuseeLogRetireNoZero.cfg, for NoRefusalWithoutDamage (3):               *)
(* retire_segment_file removes the file without zeroing its header first.  *)
(* The process stops between the removal and the directory sync; the next *)
(* open does not see the segment, so the blob file only it referenced is   *)
(* unreferenced and removed. A machine crash then brings the segment back  *)
(* with its valid header, and recovery, which starts from it, refuses for  *)
(* the missing blob. Zeroed, the segment would be skipped as retired.      *)
WeakZeroFirst == FALSE

(* FuseeLogDeleteLowest.cfg, for NoRefusalWithoutDamage (3):               *)
(* apply_recovery removes the segments past the end lowest first. A crash  *)
(* after the first removal's directory sync leaves a gap in the numbers,   *)
(* and the next open refuses. (RecoveryIdempotent, which checks the same   *)
(* thing in the abstract, is left out of that configuration so that the    *)
(* removals, now steps of the model, show it.)                             *)
WeakPastEndOrder(S) == Ascending(S)

(* FuseeLogRollAcked.cfg, for NoRefusalWithoutDamage (3): the batch that   *)
(* triggered a roll claims its marker acknowledged, since the marker's     *)
(* write has completed by the time it is sealed. Completed is not          *)
(* published: the write before the marker may still be in flight, and a   *)
(* crash that loses it leaves the marker and that batch past the chain's   *)
(* end, the batch's acked beyond the end: recovery refuses after a plain   *)
(* crash.                                                                  *)
WeakAfterRollAcked == lastId.sequence

(* FuseeLogBlobNewest.cfg, for NoRefusalWithoutDamage (3): the log keeps,  *)
(* for each blob file, the first segment whose published batch referenced  *)
(* it instead of the newest. A blob file referenced from segments 1 and 2  *)
(* is removed once segment 1 is retired, and recovery refuses for the      *)
(* missing blob of segment 2's batch.                                      *)
WeakNewestAfter(old, hs) == IF hs = {} \/ old # 0 THEN old ELSE Lowest(hs)

(* FuseeLogApplyNoSync.cfg, for NoRefusalWithoutDamage (3): apply_recovery *)
(* as it was before its closing directory sync: it syncs the directory     *)
(* only after a removal. A removal an earlier life of the boot made and    *)
(* did not sync stays undurable through an open that removes nothing, and  *)
(* a machine crash later brings the file back under a log built without    *)
(* it: a torn retired header comes back before a segment retired since,    *)
(* and recovery refuses with nothing damaged (docs/spec.md).               *)
WeakApplySteps(ds) == ds

=============================================================================
