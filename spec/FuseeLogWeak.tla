---------------------------- MODULE FuseeLogWeak ----------------------------
(***************************************************************************)
(* FuseeLog with a deliberately weakened recovery rule: the scan past the  *)
(* chain's end ignores `acked`, so recovery never refuses for a valid      *)
(* batch past the end. FuseeLogWeak.cfg substitutes it for                 *)
(* PastEndRefuses; TLC must then report that AckedInRecoveredLog (1) is    *)
(* violated: bit rot in an acknowledged batch shortens the chain, and the  *)
(* weakened rule drops the acknowledged batches after it without a word.   *)
(* This shows the check able to fail. `make spec` requires the violation.  *)
(***************************************************************************)
EXTENDS FuseeLog

WeakPastEndRefuses(d, endSeg, endSlot, last) == FALSE

=============================================================================
