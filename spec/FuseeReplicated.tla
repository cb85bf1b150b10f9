--------------------------- MODULE FuseeReplicated ---------------------------
(***************************************************************************)
(* Replicated mode's log (issue 41): a primary-backup protocol in the      *)
(* Viewstamped Replication style in which etcd, not Fusee, decides who is  *)
(* primary in which view. Fusee adds log shipping, publication at a        *)
(* quorum and the recovery rule a new primary follows before it serves.    *)
(* The design: docs/replication.md (../shared/REPLICATION.md, section 2).  *)
(* FuseeLog.tla models one replica's disk, writer and recovery; this       *)
(* module takes that log as given (a replica's durable log is a chain of   *)
(* batches, recovery returns a prefix of it) and models what crosses       *)
(* replicas.                                                               *)
(*                                                                         *)
(* Abstraction choices                                                     *)
(*                                                                         *)
(* - A replica's log is the sequence of its durable batches; the batch at  *)
(*   position i has sequence i and is identified by <<i, view>>, the view  *)
(*   whose primary sealed it. The chain (prev_crc) is what makes "my last  *)
(*   batch is <<i, w>>" stand for the whole prefix: LogMatching below is   *)
(*   the property the chain buys, checked, not assumed.                    *)
(* - A write is durable when it happens: a write that has not completed    *)
(*   by a crash is one that did not happen (FuseeLog.tla shows recovery    *)
(*   cuts a torn or missing write and everything after it).                *)
(* - etcd is one linearizable register: the view, its primary, its state  *)
(*   (recovering, normal) and the start sequence of every view that        *)
(*   reached normal (`start`, written once, in the same CAS that makes the *)
(*   view normal). Campaign and PublishStart are compare-and-swap on the   *)
(*   view. Leases are left out: a replica may campaign at any moment (as   *)
(*   if the primary's lease had just expired), so nothing here rests on    *)
(*   timing.                                                               *)
(* - Messages: seal replies and acknowledgements are kept in sets that     *)
(*   only grow, so any of them may be delivered late, again, or never. A   *)
(*   replicate is a backup reading the primary's log (the batch it lacks   *)
(*   and the primary's commit number), which a real message carries.       *)
(* - Faults: any replica crashes and restarts any number of times (its     *)
(*   volatile state goes: role, promise, commit). At most MaxFaults times  *)
(*   in all, a replica loses its disk (LoseDisk: the directory comes back  *)
(*   empty, marked as not this cluster's, until rebuilt from the primary)  *)
(*   or the tail of its log is damaged (Restart with damage: recovery cuts *)
(*   the log short, acknowledged batches included). A damaged replica      *)
(*   keeps `ackedSeen`, the highest published sequence it had been told    *)
(*   (the `acked` field of its batches), and knows that its recovery cut   *)
(*   the log at a damaged batch (`suspect`): a batch whose CRC fails is    *)
(*   there to see. A wiped directory keeps nothing and knows it is not     *)
(*   this cluster's log (its directory id is not the one etcd holds).      *)
(*                                                                         *)
(* The rule, as the code will state it                                     *)
(*                                                                         *)
(* 1. Campaign: CAS view+1, state recovering, primary = the candidate.     *)
(* 2. Seal: each replica that agrees truncates its log by the view history *)
(*    (TruncByHistory), promises the view (it refuses batches of earlier   *)
(*    views from now on) and answers with its log, its ackedSeen and       *)
(*    whether it is suspect. A wiped replica does not answer. A primary of *)
(*    an earlier view that is sealed stops.                                *)
(* 3. ChooseEnd: over answers from a quorum of replicas that are not       *)
(*    suspect (the candidate's own answer among all it uses), the log      *)
(*    whose last batch has the highest view, then the longest; never one   *)
(*    shorter than the highest ackedSeen among them (then the candidate    *)
(*    waits for more answers). The candidate copies it, cutting its own    *)
(*    divergent tail.                                                      *)
(* 4. PublishStart: CAS the view to normal with start = its end + 1.       *)
(* 5. Serve: Append; Replicate (a backup joins the primary's view once     *)
(*    etcd shows it normal, truncates by the history, takes the next batch *)
(*    once its log is a prefix of the primary's, and acknowledges it);     *)
(*    Publish (in order, once a quorum, the primary included, holds the    *)
(*    batch in this view).                                                 *)
(* 6. Repair: a wiped or suspect replica copies the serving primary's log  *)
(*    before it counts again (`fusee replica rebuild`, or automatically).  *)
(***************************************************************************)
EXTENDS Naturals, Sequences, FiniteSets, TLC

CONSTANTS
  Replica,    \* the replicas (3 or 5)
  MaxView,    \* views 1..MaxView
  MaxSeq,     \* sequences 1..MaxSeq
  MaxFaults,  \* disk losses and damaged tails, in all
  None        \* no replica

VARIABLES
  \* etcd
  eView,      \* the current view (0: none yet)
  ePrimary,   \* its primary, or None
  eState,     \* "recovering" or "normal"
  eStart,     \* view -> the sequence its primary started at; 0 until it is normal
  \* each replica
  log,        \* its durable log: a sequence of views, one a batch
  up,         \* running
  promised,   \* the highest view it promised (volatile: read from etcd at restart)
  role,       \* "backup", "candidate" or "primary"
  lead,       \* the view it is candidate or primary of (0: none)
  chosen,     \* a candidate that has chosen and copied its end
  commit,     \* a primary's published sequence (VR's commit number)
  ackedSeen,  \* the highest published sequence it was told (in its batches' acked)
  wiped,      \* its directory was lost and is not rebuilt yet
  suspect,    \* its recovery cut the log at a damaged batch, and it is not repaired yet
  \* messages and history
  seals,      \* seal answers: [view, from, log, acked]
  acks,       \* acknowledgements: [view, from, seq, ev]: "I hold your log through <<seq, ev>>"
  published,  \* ghost: every batch acknowledged to a client: [seq, ev, pview]
  publishers, \* ghost: view -> the replicas that published in it
  faults      \* disk losses and damaged tails so far

vars == <<eView, ePrimary, eState, eStart, log, up, promised, role, lead, chosen, commit,
          ackedSeen, wiped, suspect, seals, acks, published, publishers, faults>>

Views == 1..MaxView
Max(S) == IF S = {} THEN 0 ELSE CHOOSE x \in S : \A y \in S : y <= x
Quorum == (Cardinality(Replica) \div 2) + 1
Last(s) == s[Len(s)]
IsPrefix(s, t) == Len(s) <= Len(t) /\ SubSeq(t, 1, Len(s)) = s

-----------------------------------------------------------------------------
(* The rules a weakened configuration replaces (FuseeReplicatedWeak.tla).  *)

\* How many replicas, the primary included, must hold a batch before it is
\* published.
PublishQuorum == Quorum
\* How many seal answers a candidate needs before it chooses its end.
SealQuorum == Quorum
\* Whether replica r may answer a seal: not with a directory that lost its
\* disk (it would vote as an empty log).
MayVote(r) == ~wiped[r]
\* Whether a seal answer counts toward the candidate's quorum: not one from
\* a replica whose recovery cut its log at a damaged batch, which cannot
\* say what it held past its end (its log still competes as the best).
Vouches(m) == ~m.suspect
\* The better of two sealed logs: the higher last view, then the longer.
LastView(s) == IF s = <<>> THEN 0 ELSE Last(s)
Better(s, t) == \/ LastView(s) > LastView(t)
                \/ LastView(s) = LastView(t) /\ Len(s) >= Len(t)
\* A replica's log cut by a view history st (view -> start, 0: none): a
\* batch sealed in view w at sequence i is not in the log if a later view
\* w2 started at or before i.
SurvivesBy(s, i, st) == \A w2 \in Views : (w2 > s[i] /\ st[w2] > 0) => i < st[w2]
\* The chain ends at the first batch cut: everything after it goes too.
TruncBy(s, st) ==
  LET cut == {i \in 1..Len(s) : ~SurvivesBy(s, i, st)}
  IN IF cut = {} THEN s ELSE SubSeq(s, 1, (CHOOSE c \in cut : \A d \in cut : c <= d) - 1)
\* Cut by the whole history etcd holds.
Survives(s, i) == SurvivesBy(s, i, eStart)
TruncByHistory(s) == TruncBy(s, eStart)

\* What a replica's seal answer holds: its log cut by the history.
SealCut(s) == TruncByHistory(s)

(* The rules FuseeReplicatedCode.tla replaces with the code's own (its     *)
(* configurations check them; docs/spec.md).                               *)

\* Whether backup r may take primary p's batches: in the view it promised,
\* or, not promised yet, once etcd shows p's view normal.
JoinOK(p, r) == \/ promised[r] = lead[p]
                \/ promised[r] < lead[p] /\ eView = lead[p] /\ eState = "normal"
\* The histories (view -> start) a backup may cut its log by before it
\* takes p's batch: the one etcd holds.
ReplicateStarts(p) == {eStart}
\* The highest published sequence a backup is told by taking p's batch: the
\* commit p's message carries.
ReplicateAcked(p, r) == Max({ackedSeen[r], commit[p]})
\* Whether a wiped or suspect replica r may be repaired from p: p is the
\* serving primary of the view etcd shows normal.
RebuildOK(r, p) == role[p] = "primary" /\ eState = "normal" /\ eView = lead[p]
\* What a repaired replica was told: p's commit.
RebuildAcked(p, r) == commit[p]
\* Whether `fusee replica rebuild` makes a wiped directory the cluster's
\* again, empty and suspect, to be filled by ordinary replication
\* (RebuildEmpty); here the rebuild copies the primary's log at once.
RebuildByReplication == FALSE

-----------------------------------------------------------------------------
TypeOK ==
  /\ eView \in 0..MaxView
  /\ ePrimary \in Replica \cup {None}
  /\ eState \in {"recovering", "normal"}
  /\ eStart \in [Views -> 0..(MaxSeq + 1)]
  /\ \A r \in Replica : log[r] \in Seq(Views) /\ Len(log[r]) <= MaxSeq
  /\ up \in [Replica -> BOOLEAN]
  /\ promised \in [Replica -> 0..MaxView]
  /\ role \in [Replica -> {"backup", "candidate", "primary"}]
  /\ lead \in [Replica -> 0..MaxView]
  /\ chosen \in [Replica -> BOOLEAN]
  /\ commit \in [Replica -> 0..MaxSeq]
  /\ ackedSeen \in [Replica -> 0..MaxSeq]
  /\ wiped \in [Replica -> BOOLEAN]
  /\ suspect \in [Replica -> BOOLEAN]
  /\ faults \in 0..MaxFaults

Init ==
  /\ eView = 0 /\ ePrimary = None /\ eState = "normal"
  /\ eStart = [v \in Views |-> 0]
  /\ log = [r \in Replica |-> <<>>]
  /\ up = [r \in Replica |-> TRUE]
  /\ promised = [r \in Replica |-> 0]
  /\ role = [r \in Replica |-> "backup"]
  /\ lead = [r \in Replica |-> 0]
  /\ chosen = [r \in Replica |-> FALSE]
  /\ commit = [r \in Replica |-> 0]
  /\ ackedSeen = [r \in Replica |-> 0]
  /\ wiped = [r \in Replica |-> FALSE]
  /\ suspect = [r \in Replica |-> FALSE]
  /\ seals = {} /\ acks = {} /\ published = {}
  /\ publishers = [v \in Views |-> {}]
  /\ faults = 0

-----------------------------------------------------------------------------
(* 1. A replica wins etcd's CAS for the next view.                         *)
Campaign(r) ==
  /\ up[r] /\ ~wiped[r]
  /\ eView < MaxView
  /\ eView' = eView + 1 /\ ePrimary' = r /\ eState' = "recovering"
  /\ role' = [role EXCEPT ![r] = "candidate"]
  /\ lead' = [lead EXCEPT ![r] = eView + 1]
  /\ chosen' = [chosen EXCEPT ![r] = FALSE]
  /\ commit' = [commit EXCEPT ![r] = 0]
  /\ UNCHANGED <<eStart, log, up, promised, ackedSeen, wiped, suspect, seals, acks, published, publishers, faults>>

(* 2. Replica r seals for candidate c's view: truncates by the history it  *)
(* reads from etcd, promises, answers. Sealed, a primary or candidate of   *)
(* an earlier view stops.                                                  *)
Seal(c, r) ==
  LET v == lead[c]
      cut == SealCut(log[r])
  IN /\ role[c] = "candidate" /\ up[c] /\ up[r]
     /\ MayVote(r)
     /\ promised[r] < v
     /\ log' = [log EXCEPT ![r] = cut]
     /\ promised' = [promised EXCEPT ![r] = v]
     /\ IF r # c /\ lead[r] < v
          THEN /\ role' = [role EXCEPT ![r] = "backup"]
               /\ lead' = [lead EXCEPT ![r] = 0]
               /\ chosen' = [chosen EXCEPT ![r] = FALSE]
               /\ commit' = [commit EXCEPT ![r] = 0]
          ELSE UNCHANGED <<role, lead, chosen, commit>>
     /\ seals' = seals \cup {[view |-> v, from |-> r, log |-> cut, acked |-> ackedSeen[r], suspect |-> suspect[r]]}
     /\ UNCHANGED <<eView, ePrimary, eState, eStart, up, ackedSeen, wiped, suspect, acks, published, publishers, faults>>

(* 3. Over a quorum of answers, its own among them, the candidate takes    *)
(* the best log, if it reaches every sequence any of them saw published.   *)
ChooseEnd(c) ==
  LET v == lead[c]
      answers == {m \in seals : m.view = v}
  IN /\ role[c] = "candidate" /\ up[c] /\ ~chosen[c]
     /\ \E Q \in SUBSET answers :
          /\ Cardinality({m.from : m \in {a \in Q : Vouches(a)}}) >= SealQuorum
          /\ \E m \in Q : m.from = c
          /\ \E best \in Q :
               /\ \A m \in Q : Better(best.log, m.log)
               /\ Len(best.log) >= Max({m.acked : m \in Q})
               /\ log' = [log EXCEPT ![c] = best.log]
     /\ chosen' = [chosen EXCEPT ![c] = TRUE]
     /\ UNCHANGED <<eView, ePrimary, eState, eStart, up, promised, role, lead, commit, ackedSeen, wiped, suspect,
                    seals, acks, published, publishers, faults>>

(* 4. The candidate CASes its view to normal, starting after its end.      *)
PublishStart(c) ==
  LET v == lead[c]
  IN /\ role[c] = "candidate" /\ up[c] /\ chosen[c]
     /\ eView = v /\ ePrimary = c /\ eState = "recovering"
     /\ eState' = "normal"
     /\ eStart' = [eStart EXCEPT ![v] = Len(log[c]) + 1]
     /\ role' = [role EXCEPT ![c] = "primary"]
     /\ commit' = [commit EXCEPT ![c] = 0]
     /\ UNCHANGED <<eView, ePrimary, log, up, promised, lead, chosen, ackedSeen, wiped, suspect, seals, acks,
                    published, publishers, faults>>

(* 5. Serving.                                                             *)
AppendBatch(p) ==
  /\ role[p] = "primary" /\ up[p]
  /\ Len(log[p]) < MaxSeq
  /\ log' = [log EXCEPT ![p] = Append(log[p], lead[p])]
  /\ UNCHANGED <<eView, ePrimary, eState, eStart, up, promised, role, lead, chosen, commit, ackedSeen, wiped, suspect,
                 seals, acks, published, publishers, faults>>

\* Backup r takes primary p's next batch, durably, and acknowledges it.
\* Only in the view it promised: a replica that has not promised p's view
\* yet reads etcd first and joins it if it is p's and normal (a sealed
\* primary of an earlier view stops). Only where its log, cut by the
\* history, continues into p's (the chain check: sequence and prev_crc).
\* The message carries p's commit. The acknowledgement may arrive late or
\* never: Publish reads the set of them.
Replicate(p, r) ==
  \E st \in ReplicateStarts(p) :
  LET cut == TruncBy(log[r], st)
      next == Append(cut, log[p][Len(cut) + 1])
  IN /\ role[p] = "primary" /\ up[p] /\ up[r] /\ r # p /\ ~wiped[r]
     /\ JoinOK(p, r)
     /\ IsPrefix(cut, log[p]) /\ Len(cut) < Len(log[p])
     /\ log' = [log EXCEPT ![r] = next]
     /\ promised' = [promised EXCEPT ![r] = lead[p]]
     /\ IF lead[r] # 0 /\ lead[r] < lead[p]
          THEN /\ role' = [role EXCEPT ![r] = "backup"]
               /\ lead' = [lead EXCEPT ![r] = 0]
               /\ chosen' = [chosen EXCEPT ![r] = FALSE]
               /\ commit' = [commit EXCEPT ![r] = 0]
          ELSE UNCHANGED <<role, lead, chosen, commit>>
     /\ ackedSeen' = [ackedSeen EXCEPT ![r] = ReplicateAcked(p, r)]
     /\ acks' = acks \cup {[view |-> lead[p], from |-> r, seq |-> Len(next), ev |-> Last(next)]}
     /\ UNCHANGED <<eView, ePrimary, eState, eStart, up, wiped, suspect, seals, published, publishers, faults>>

\* Primary p publishes its next batch once PublishQuorum replicas, itself
\* included, hold it in p's view: an ack in that view through a batch of
\* p's log at or past it (the chain makes the prefix the same).
HeldBy(p, q, s) ==
  \/ q = p
  \/ \E a \in acks : /\ a.view = lead[p] /\ a.from = q /\ a.seq >= s
                     /\ a.seq <= Len(log[p]) /\ log[p][a.seq] = a.ev
Publish(p) ==
  LET s == commit[p] + 1
  IN /\ role[p] = "primary" /\ up[p]
     /\ s <= Len(log[p])
     /\ Cardinality({q \in Replica : HeldBy(p, q, s)}) >= PublishQuorum
     /\ commit' = [commit EXCEPT ![p] = s]
     /\ published' = published \cup {[seq |-> s, ev |-> log[p][s], pview |-> lead[p]]}
     /\ publishers' = [publishers EXCEPT ![lead[p]] = @ \cup {p}]
     /\ UNCHANGED <<eView, ePrimary, eState, eStart, log, up, promised, role, lead, chosen, ackedSeen,
                    wiped, suspect, seals, acks, faults>>

-----------------------------------------------------------------------------
(* Faults.                                                                 *)
Stop(r) ==
  /\ up' = [up EXCEPT ![r] = FALSE]
  /\ promised' = [promised EXCEPT ![r] = 0]
  /\ role' = [role EXCEPT ![r] = "backup"]
  /\ lead' = [lead EXCEPT ![r] = 0]
  /\ chosen' = [chosen EXCEPT ![r] = FALSE]
  /\ commit' = [commit EXCEPT ![r] = 0]

Crash(r) ==
  /\ up[r]
  /\ Stop(r)
  /\ UNCHANGED <<eView, ePrimary, eState, eStart, log, ackedSeen, wiped, suspect, seals, acks, published, publishers, faults>>

\* Restart reads the view from etcd (linearizably) before it takes
\* anything, so no promise needs to be on disk. With damage, recovery cut
\* the log short (the batches' acked says how far it had been told).
Restart(r) ==
  /\ ~up[r]
  /\ up' = [up EXCEPT ![r] = TRUE]
  /\ promised' = [promised EXCEPT ![r] = eView]
  /\ \/ UNCHANGED <<log, faults>>
     \/ /\ faults < MaxFaults /\ log[r] # <<>>
        /\ \E k \in 0..(Len(log[r]) - 1) : log' = [log EXCEPT ![r] = SubSeq(log[r], 1, k)]
        /\ faults' = faults + 1
  /\ suspect' = [suspect EXCEPT ![r] = suspect[r] \/ (log' # log)]
  /\ UNCHANGED <<eView, ePrimary, eState, eStart, role, lead, chosen, commit, ackedSeen, wiped, seals, acks,
                 published, publishers>>

\* A replica loses its directory: it comes back empty and knows it is not
\* this cluster's log any more (its directory id is not the one etcd holds).
LoseDisk(r) ==
  /\ faults < MaxFaults
  /\ Stop(r)
  /\ log' = [log EXCEPT ![r] = <<>>]
  /\ ackedSeen' = [ackedSeen EXCEPT ![r] = 0]
  /\ wiped' = [wiped EXCEPT ![r] = TRUE]
  /\ suspect' = [suspect EXCEPT ![r] = FALSE]
  /\ faults' = faults + 1
  /\ UNCHANGED <<eView, ePrimary, eState, eStart, seals, acks, published, publishers>>

\* `fusee replica rebuild` (a wiped replica), or the repair of a suspect
\* one: it copies the serving primary's log.
Rebuild(r, p) ==
  /\ wiped[r] \/ suspect[r]
  /\ up[r] /\ up[p] /\ r # p
  /\ RebuildOK(r, p)
  /\ log' = [log EXCEPT ![r] = log[p]]
  /\ ackedSeen' = [ackedSeen EXCEPT ![r] = RebuildAcked(p, r)]
  /\ promised' = [promised EXCEPT ![r] = lead[p]]
  /\ wiped' = [wiped EXCEPT ![r] = FALSE]
  /\ suspect' = [suspect EXCEPT ![r] = FALSE]
  /\ UNCHANGED <<eView, ePrimary, eState, eStart, up, role, lead, chosen, commit, seals, acks, published,
                 publishers, faults>>

\* `fusee replica rebuild` as the code does it (RebuildByReplication): the
\* wiped directory is made the cluster's again, empty, and counts as
\* suspect (it may answer a seal, which does not count toward the quorum)
\* until it holds a primary's whole log: it takes the batches by Replicate,
\* and Rebuild clears it once it holds them.
RebuildEmpty(r) ==
  /\ RebuildByReplication
  /\ wiped[r] /\ up[r]
  /\ wiped' = [wiped EXCEPT ![r] = FALSE]
  /\ suspect' = [suspect EXCEPT ![r] = TRUE]
  /\ UNCHANGED <<eView, ePrimary, eState, eStart, log, up, promised, role, lead, chosen, commit, ackedSeen,
                 seals, acks, published, publishers, faults>>

Next ==
  \/ \E r \in Replica : Campaign(r) \/ ChooseEnd(r) \/ PublishStart(r) \/ AppendBatch(r)
                        \/ Publish(r) \/ Crash(r) \/ Restart(r) \/ LoseDisk(r) \/ RebuildEmpty(r)
  \/ \E c, r \in Replica : Seal(c, r) \/ Replicate(c, r) \/ Rebuild(r, c)

Spec == Init /\ [][Next]_vars

-----------------------------------------------------------------------------
(* Invariants.                                                             *)

\* Nothing acknowledged is lost: every published batch is in the log of
\* every primary of its view or a later one, at its sequence.
AckedNeverLost ==
  \A e \in published : \A r \in Replica :
    (role[r] = "primary" /\ lead[r] >= e.pview) => (Len(log[r]) >= e.seq /\ log[r][e.seq] = e.ev)

\* The chain's promise: two logs holding the same batch hold the same
\* batches before it.
LogMatching ==
  \A r, q \in Replica : \A i \in 1..Len(log[r]) :
    (i <= Len(log[q]) /\ log[r][i] = log[q][i]) => SubSeq(log[r], 1, i) = SubSeq(log[q], 1, i)

\* Replicas agree at and below a primary's commit point: a replica that
\* promised its view and holds a batch at or below it holds the primary's,
\* once its log is cut by the history (as it is before it acknowledges or
\* takes a batch: a replica sealed before the view's start was published
\* may still hold an old view's batch there until then).
AgreeBelowCommit ==
  \A p, r \in Replica :
    (role[p] = "primary" /\ promised[r] = lead[p] /\ ~wiped[r]) =>
      LET cut == TruncByHistory(log[r])
      IN \A i \in 1..commit[p] : i <= Len(cut) => cut[i] = log[p][i]

\* At most one replica publishes in a view.
OnePublisherPerView == \A v \in Views : Cardinality(publishers[v]) <= 1

Symmetry == Permutations(Replica)
=============================================================================
