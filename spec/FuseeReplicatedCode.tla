------------------------- MODULE FuseeReplicatedCode -------------------------
(***************************************************************************)
(* FuseeReplicated with the rules the code (replication/replica_core.hpp)  *)
(* states differently from the spec, each substituted for the spec's in    *)
(* FuseeReplicatedCode.cfg and FuseeReplicatedCodeViews.cfg. TLC must      *)
(* find no error (spec/run-tlc; docs/spec.md).                             *)
(***************************************************************************)
EXTENDS FuseeReplicated

(* Joining a view without reading etcd. A backup takes batches from any    *)
(* primary of a view it has not promised past: a primary sends only after  *)
(* its PublishStart CAS succeeded, so the view is (or was) normal.         *)
CodeJoinOK(p, r) == promised[r] <= lead[p]

(* The backup cuts its log by the starts it knows: those the primary's     *)
(* message carries (views up to the primary's, starts_through) merged with *)
(* any it read from etcd or a seal request, each source a snapshot of      *)
(* every start through some view. So: every start through some view k at   *)
(* or past p's (k = MaxView: the spec's cut by all of etcd's history).     *)
StartsThrough(v) == [w \in Views |-> IF w <= v THEN eStart[w] ELSE 0]
CodeReplicateStarts(p) == {StartsThrough(k) : k \in lead[p]..MaxView}

(* Repair by ordinary replication from any primary whose view r has not    *)
(* promised past, without reading etcd; suspect and wiped clear once r     *)
(* holds p's whole log (Rebuild), and a wiped directory that is made the   *)
(* cluster's again takes batches as a suspect replica meanwhile            *)
(* (RebuildEmpty).                                                         *)
CodeRebuildOK(r, p) == role[p] = "primary" /\ promised[r] <= lead[p]
CodeRebuildByReplication == TRUE

(* ackedSeen. In the code it is the highest `acked` of the batches a       *)
(* replica holds, a batch's acked being its primary's commit when it       *)
(* appended the batch: never above the commit the spec's rule records (the *)
(* primary's commit when the batch is replicated, or copied). Here it is   *)
(* never raised at all, so every seal answer reports 0 and ChooseEnd's     *)
(* "never shorter than the highest ackedSeen" never holds a candidate      *)
(* back: a weaker rule than the code's, whose every behaviour it includes. *)
CodeReplicateAcked(p, r) == ackedSeen[r]
CodeRebuildAcked(p, r) == ackedSeen[r]
=============================================================================
