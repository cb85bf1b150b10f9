------------------------------ MODULE FuseeLog ------------------------------
(***************************************************************************)
(* The shared log's writer, crashes, reopening and recovery rule.          *)
(*                                                                         *)
(* The code this states: wal/log.cpp (Log::seal_next, roll_segment,        *)
(* complete: how a batch gets its sequence, prev_crc, acked and life; at   *)
(* most kWritesInFlightMax = 2 writes in flight; publication in order),    *)
(* wal/recovery.cpp (the Planner: load_segments, walk_chain, probe,        *)
(* scan_past_end, choose_deletions; apply_recovery) and                    *)
(* wal/log_retire.cpp (Log::retire). Prose: docs/durability.md,            *)
(* docs/log-format.md sections 7 to 9.                                     *)
(*                                                                         *)
(* Abstraction choices                                                     *)
(*                                                                         *)
(* - Two segments and one roll. A segment is a header (valid, damaged, or  *)
(*   no file at all), a salt, first_sequence, prev (the header's prev_crc) *)
(*   and Slots batch slots. Every batch takes exactly one slot (one        *)
(*   block); the last slot of a segment is the block the writer keeps free *)
(*   for the roll marker. The writer never rolls out of segment 2:         *)
(*   MaxSeq bounds the sequences it seals instead.                         *)
(* - A slot holds zeros (preallocated, never written), torn bytes (a       *)
(*   header that does not decode or a CRC that fails: recovery treats both *)
(*   the same way) or a batch. Bytes from an earlier life of the log are   *)
(*   simply batches that a crash left behind: recovery dropped them, the   *)
(*   next life did not overwrite them (yet).                               *)
(* - prev_crc is modelled as the identity of the previous batch:           *)
(*   [sequence, life]. A life seals each sequence at most once, and the    *)
(*   CRC covers sequence and life, so this is the CRC under the assumption *)
(*   that CRC-32C never collides. Segment 1's header has prev Genesis (the *)
(*   prev_crc 0); segment 2's header has the roll marker's identity.       *)
(* - The salt is modelled as the life that created the segment file (a     *)
(*   life creates segment 2 at most once; segment 1 is created before life *)
(*   1 with salt 0). A batch verifies only in a segment whose salt it      *)
(*   carries: a batch left in an earlier incarnation of the file never     *)
(*   verifies. Segment files are created zero-filled, as create_segment    *)
(*   does, so an earlier incarnation's bytes appear only as a whole        *)
(*   segment past the chain's end (written by an earlier life, not yet     *)
(*   deleted), which the scan past the end reads with its own salt.        *)
(* - `disk` is what is durable. A write completes only once durable        *)
(*   (O_DIRECT + RWF_DSYNC, or write + fdatasync), so completion puts the  *)
(*   batch on the disk. A crash resolves each write still in flight: it    *)
(*   lands whole, torn, or not at all. Creating segment 2 is durable       *)
(*   before its roll marker is written (roll_segment); a crash inside      *)
(*   create_segment leaves a file whose header is damaged.                 *)
(* - A failed write poisons the log (P5): nothing after it is published.   *)
(*   Seen from the disk that is a crash whose in-flight writes may still   *)
(*   land, so it is not modelled apart. The close marker is a batch sealed *)
(*   with nothing in flight (acked = sequence - 1); such batches are       *)
(*   modelled, a clean close is not modelled apart.                        *)
(* - The batch that triggers a roll captures `acked` before the roll and   *)
(*   the marker reads published_sequence_ again; the model gives both the  *)
(*   value at the roll (the larger one the code could write).              *)
(* - Records, sections, shards, LSNs and blobs are not modelled: a batch   *)
(*   that passes its CRC always decodes, so the refusals for bodies that   *)
(*   do not decode, for LSN gaps and for bad blobs are out of scope, and   *)
(*   so are truncated segments (check_size).                               *)
(* - Bit rot (the Damage action) is the only way acknowledged data gets    *)
(*   damaged. It turns an acknowledged batch into torn bytes while the     *)
(*   process is down, when the log still holds proof that the batch was    *)
(*   acknowledged: a valid batch whose acked reaches the damaged sequence. *)
(*   Damage to the newest acknowledged batch with no later batch sealed    *)
(*   after its acknowledgement cannot be told from a torn write by any     *)
(*   rule (docs/durability.md); it is left out.                            *)
(* - Retirement (Log::retire with the checkpointer's keep_from_sequence,   *)
(*   recovery's first_sequence_max) is modelled only when the constant     *)
(*   Retire is TRUE: the checkpointer is the most eager one, whose         *)
(*   checkpoints cover everything published (keep_from_sequence =          *)
(*   published_sequence_ + 1), and retiring segment 1 removes it in one    *)
(*   step (zeroing its header first is the same to recovery). FuseeLog.cfg *)
(*   keeps Retire FALSE. FuseeLogRetire.cfg sets it, and TLC then finds    *)
(*   that the code's rule fails when retirement leaves an oldest segment   *)
(*   whose chain is empty (see Recover and docs/spec.md).                  *)
(*                                                                         *)
(* The invariants (the numbering of issue 8)                               *)
(*   (1) AckedInRecoveredLog: every acknowledged batch is in the recovered *)
(*       log, or recovery refuses.                                         *)
(*   (2) OnlyTheChain: recovery never accepts a batch outside the current  *)
(*       chain (torn, stale or earlier-life bytes).                        *)
(*   (3) NoRefusalWithoutDamage: a crash that damaged no acknowledged data *)
(*       never refuses.                                                    *)
(*   (4) RecoveryIdempotent: recovering twice gives the same log.          *)
(* Each is checked in every reachable state: recovery of the disk as it    *)
(* stands is recovery after a crash that lands none of the writes in       *)
(* flight; the other outcomes are the states after the Crash action.       *)
(***************************************************************************)
EXTENDS Naturals, Sequences, FiniteSets, TLC

CONSTANTS
  Slots,      \* batch slots per segment, the roll marker's slot included
  MaxSeq,     \* the writer seals no sequence above this
  MaxLife,    \* opens of the log: up to MaxLife - 1 crashes
  MaxDamage,  \* bit-rot events
  Retire      \* whether segment 1 may be retired (BOOLEAN)

ASSUME /\ Slots \in Nat /\ Slots >= 2
       /\ MaxSeq \in Nat /\ MaxSeq >= 1
       /\ MaxLife \in Nat /\ MaxLife >= 1
       /\ MaxDamage \in Nat
       /\ Retire \in BOOLEAN

WritesInFlightMax == 2          \* kWritesInFlightMax (wal/limits.hpp)
Segments == 1..2
SlotIdx == 0..(Slots - 1)
MarkerSlot == Slots - 1         \* the block kept free for the roll marker

(* What a batch's CRC stands for, and so what prev_crc names. *)
Id(sequence, life) == [sequence |-> sequence, life |-> life]
Genesis == Id(0, 0)             \* segment 1's header prev_crc: 0

(* Slot contents. One record shape for all, so TLC can compare them. *)
Bytes(kind) == [kind |-> kind, sequence |-> 0, prev |-> Genesis, acked |-> 0,
                life |-> 0, roll |-> FALSE, salt |-> 0]
Zero == Bytes("zero")           \* preallocated zeros: the clean end
Torn == Bytes("torn")           \* no batch header, or a CRC that fails
Batch(sequence, life, prev, acked, roll, salt) ==
  [kind |-> "batch", sequence |-> sequence, prev |-> prev, acked |-> acked,
   life |-> life, roll |-> roll, salt |-> salt]
IdOf(b) == Id(b.sequence, b.life)

NoSegment == [header |-> "none", salt |-> 0, first |-> 0, prev |-> Genesis,
              slots |-> [i \in SlotIdx |-> Zero]]
NewSegment(salt, first, prev) ==
  [header |-> "valid", salt |-> salt, first |-> first, prev |-> prev,
   slots |-> [i \in SlotIdx |-> Zero]]
HeaderlessSegment == [NoSegment EXCEPT !.header = "damaged"]

VARIABLES
  disk,         \* [Segments -> segment]: what is durable
  ckpt,         \* first_sequence_max: what the run store's checkpoints need
  phase,        \* "running" or "down" (crashed, not yet reopened)
  life,         \* the current life (the last one while down)
  wseg, wslot,  \* write_segment and write_offset: where the next batch goes
  nextSeq,      \* next_sequence_
  lastId,       \* last_crc_: identity of the last batch sealed
  published,    \* published_sequence_: the highest sequence acknowledged
  inflight,     \* in_flight_: writes sealed and not yet published, in order
  rolling,      \* a roll marker is sealed, the batch that triggered it not yet
  rollAcked,    \* the acked that batch captured before the roll
  acknowledged, \* ghost: identities of every batch ever reported durable
  lineage,      \* ghost: identities of the chain this life builds on, and
                \*   of every batch this life sealed
  retired,      \* ghost: identities of acknowledged batches retired with
                \*   segment 1 (checkpoints cover them)
  damaged       \* ghost: bit-rot events so far

vars == <<disk, ckpt, phase, life, wseg, wslot, nextSeq, lastId, published,
          inflight, rolling, rollAcked, acknowledged, lineage, retired, damaged>>
writer == <<wseg, wslot, nextSeq, lastId, published, inflight, rolling,
            rollAcked>>

-----------------------------------------------------------------------------
(***************************************************************************)
(* The recovery rule (wal/recovery.cpp, Planner).                          *)
(***************************************************************************)

(* probe(): a batch header decodes and its CRC holds with the salt of the  *)
(* segment holding it.                                                     *)
ValidAt(d, s, i) ==
  /\ d[s].header = "valid"
  /\ d[s].slots[i].kind = "batch"
  /\ d[s].slots[i].salt = d[s].salt

(* probe() returns `valid`: the batch continues the chain. *)
Continues(d, s, i, expSeq, expPrev) ==
  /\ ValidAt(d, s, i)
  /\ d[s].slots[i].sequence = expSeq
  /\ d[s].slots[i].prev = expPrev

Walked(refused, chain, s, i) ==
  [refused |-> refused, chain |-> chain, endSeg |-> s, endSlot |-> i]

(* walk_chain(): follow the chain from (s, i), expecting sequence expSeq   *)
(* and prev expPrev. It stops at the first slot that does not continue     *)
(* the chain (zeros, torn, stale, an earlier life, a foreign salt) or at   *)
(* the segment's end. After a roll marker the next segment must exist,     *)
(* have a valid header and continue the chain, or recovery refuses.        *)
RECURSIVE Walk(_, _, _, _, _, _)
Walk(d, s, i, expSeq, expPrev, chain) ==
  IF i > MarkerSlot \/ ~Continues(d, s, i, expSeq, expPrev)
  THEN Walked(FALSE, chain, s, i)
  ELSE LET b == d[s].slots[i] IN
       IF ~b.roll
       THEN Walk(d, s, i + 1, b.sequence + 1, IdOf(b), Append(chain, b))
       ELSE IF \/ s + 1 \notin Segments
               \/ d[s + 1].header # "valid"
               \/ d[s + 1].first # b.sequence + 1
               \/ d[s + 1].prev # IdOf(b)
            THEN Walked(TRUE, Append(chain, b), s, i + 1)
            ELSE Walk(d, s + 1, 0, b.sequence + 1, IdOf(b), Append(chain, b))

(* scan_past_end(): a valid batch (checked with its own segment's salt)    *)
(* anywhere past the chain's end, in the end segment from the end on and   *)
(* in every later segment with a valid header, whose acked reaches past    *)
(* the end: an acknowledged batch was lost, recovery refuses. `last` is    *)
(* plan_.last_sequence, so the code's `expected` is last + 1.              *)
PastEndRefuses(d, endSeg, endSlot, last) ==
  \E s \in Segments :
    /\ s >= endSeg
    /\ d[s].header = "valid"
    /\ \E i \in SlotIdx :
         /\ s > endSeg \/ i >= endSlot
         /\ ValidAt(d, s, i)
         /\ d[s].slots[i].acked >= last + 1

(* load_segments(): the oldest segment file. Leading segments retired      *)
(* (deleted, or zeroed first) are skipped; in the model segment 1 is the   *)
(* only one that can be retired, and it is then gone. (The code also skips *)
(* a leading damaged header the checkpoints do not need; the model never   *)
(* damages segment 1's header. There is no gap in segment numbers to       *)
(* refuse with two segments.)                                              *)
Oldest(d) == IF d[1].header = "none" THEN 2 ELSE 1

(* plan_recovery(). `lastSeq` and `lastId` are plan_.last_sequence and     *)
(* plan_.last_crc as walk_chain sets them: an empty chain ends where the   *)
(* oldest segment's header says it starts (first_sequence - 1, prev_crc).  *)
(* Setting them to 0 instead, as the code once did, is refused after a     *)
(* plain crash once a segment was retired (FuseeLogRetire.cfg found it).   *)
Recover(d) ==
  LET o == Oldest(d)
      w == Walk(d, o, 0, d[o].first, d[o].prev, <<>>)
      n == Len(w.chain)
      last == IF n = 0 THEN d[o].first - 1 ELSE w.chain[n].sequence
      lastId_ == IF n = 0 THEN d[o].prev ELSE IdOf(w.chain[n])
      \* The oldest segment's header is damaged or zeroed, or the log does
      \* not reach back as far as the checkpoints need.
      startLost == d[o].header # "valid" \/ d[o].first > ckpt
  IN [refused |-> startLost \/ w.refused
                  \/ PastEndRefuses(d, w.endSeg, w.endSlot, last),
      oldest |-> o,
      first |-> d[o].first,
      chain |-> w.chain,
      endSeg |-> w.endSeg,
      endSlot |-> w.endSlot,
      lastSeq |-> last,
      lastId |-> lastId_]

(* apply_recovery(): delete the segments past the end segment and the      *)
(* retired leading ones. Bytes past the end inside the end segment stay.   *)
ApplyPlan(d, r) ==
  [s \in Segments |-> IF s > r.endSeg \/ s < r.oldest THEN NoSegment ELSE d[s]]

ChainIds(r) == {IdOf(r.chain[k]) : k \in 1..Len(r.chain)}

-----------------------------------------------------------------------------
(***************************************************************************)
(* The writer (wal/log.cpp).                                               *)
(***************************************************************************)

Init ==
  /\ disk = [s \in Segments |-> IF s = 1 THEN NewSegment(0, 1, Genesis)
                                         ELSE NoSegment]
  /\ ckpt = 1
  /\ phase = "running"
  /\ life = 1
  /\ wseg = 1
  /\ wslot = 0
  /\ nextSeq = 1
  /\ lastId = Genesis
  /\ published = 0
  /\ inflight = <<>>
  /\ rolling = FALSE
  /\ rollAcked = 0
  /\ acknowledged = {}
  /\ lineage = {}
  /\ retired = {}
  /\ damaged = 0

(* seal_next(): the next batch gets sequence next_sequence_, prev_crc      *)
(* last_crc_, acked as given, this life, and the write segment's salt; its *)
(* write is submitted at the write position.                               *)
SealAt(acked) ==
  LET b == Batch(nextSeq, life, lastId, acked, FALSE, disk[wseg].salt)
  IN /\ inflight' = Append(inflight, [batch |-> b, seg |-> wseg,
                                      slot |-> wslot, done |-> FALSE])
     /\ nextSeq' = nextSeq + 1
     /\ lastId' = IdOf(b)
     /\ wslot' = wslot + 1
     /\ lineage' = lineage \cup {IdOf(b)}

(* has_work_locked(): fewer than two writes sealed and not yet published.  *)
(* The batch fits: it leaves the last block free for the roll marker.      *)
Seal ==
  /\ phase = "running"
  /\ ~rolling
  /\ Len(inflight) < WritesInFlightMax
  /\ nextSeq <= MaxSeq
  /\ wslot < MarkerSlot
  /\ SealAt(published)
  /\ UNCHANGED <<disk, ckpt, phase, life, wseg, published, rolling,
                 rollAcked, acknowledged, retired, damaged>>

(* roll_segment(): the batch does not fit. Seal the marker (acked is       *)
(* published_sequence_), create segment 2 durably with a new salt,         *)
(* first_sequence = marker + 1 and prev = the marker, then write the       *)
(* marker into the kept block; the batch that triggered the roll is sealed *)
(* into segment 2 once the marker's write has completed (SealAfterRoll).   *)
RollEnabled ==
  /\ phase = "running"
  /\ ~rolling
  /\ Len(inflight) < WritesInFlightMax
  /\ wseg = 1
  /\ wslot = MarkerSlot
  /\ nextSeq + 1 <= MaxSeq

Roll ==
  /\ RollEnabled
  /\ LET m == Batch(nextSeq, life, lastId, published, TRUE, disk[1].salt)
     IN /\ disk' = [disk EXCEPT ![2] = NewSegment(life, nextSeq + 1, IdOf(m))]
        /\ inflight' = Append(inflight, [batch |-> m, seg |-> 1,
                                         slot |-> MarkerSlot, done |-> FALSE])
        /\ lastId' = IdOf(m)
        /\ lineage' = lineage \cup {IdOf(m)}
  /\ nextSeq' = nextSeq + 1
  /\ wseg' = 2
  /\ wslot' = 0
  /\ rolling' = TRUE
  /\ rollAcked' = published
  /\ UNCHANGED <<ckpt, phase, life, published, acknowledged, retired, damaged>>

(* The marker is written synchronously under seal_mu_ (no other batch is  *)
(* sealed meanwhile); right after it completes, the same seal_next() seals *)
(* the pending batch, even with the marker still unpublished behind the    *)
(* other write: in_flight_ may then hold three entries, at most two of     *)
(* them not yet durable.                                                   *)
SealAfterRoll ==
  /\ phase = "running"
  /\ rolling
  /\ \A k \in 1..Len(inflight) : inflight[k].batch.roll => inflight[k].done
  /\ SealAt(rollAcked)
  /\ rolling' = FALSE
  /\ UNCHANGED <<disk, ckpt, phase, life, wseg, published, rollAcked,
                 acknowledged, retired, damaged>>

(* How many writes at the front have completed: complete() publishes them. *)
DonePrefix(s) ==
  IF \E k \in 1..Len(s) : ~s[k].done
  THEN (CHOOSE k \in 1..Len(s) : ~s[k].done /\ \A j \in 1..(k - 1) : s[j].done) - 1
  ELSE Len(s)

(* complete(): write k is durable. Positions are published strictly in     *)
(* order: the writes at the front that are done leave in_flight_,          *)
(* published_sequence_ moves to the last of them, and they are reported    *)
(* durable (acknowledged).                                                 *)
Complete(k) ==
  /\ phase = "running"
  /\ ~inflight[k].done
  /\ LET w == inflight[k]
         marked == [inflight EXCEPT ![k].done = TRUE]
         n == DonePrefix(marked)
     IN /\ disk' = [disk EXCEPT ![w.seg].slots[w.slot] = w.batch]
        /\ inflight' = SubSeq(marked, n + 1, Len(marked))
        /\ published' = IF n = 0 THEN published ELSE marked[n].batch.sequence
        /\ acknowledged' = acknowledged \cup {IdOf(marked[j].batch) : j \in 1..n}
  /\ UNCHANGED <<ckpt, phase, life, wseg, wslot, nextSeq, lastId, rolling,
                 rollAcked, lineage, retired, damaged>>

(* A crash at any moment: each write in flight (sealed, not completed)     *)
(* lands whole, torn, or not at all (the slot keeps what it held: zeros    *)
(* or an earlier life's batch). The writer's memory is lost.               *)
Pending == {k \in 1..Len(inflight) : ~inflight[k].done}

AfterCrash(outcome) ==
  LET SlotAfter(s, i) ==
        IF \E k \in Pending : inflight[k].seg = s /\ inflight[k].slot = i
        THEN LET k == CHOOSE k \in Pending : inflight[k].seg = s /\ inflight[k].slot = i
             IN CASE outcome[k] = "whole" -> inflight[k].batch
                  [] outcome[k] = "torn"  -> Torn
                  [] OTHER                -> disk[s].slots[i]
        ELSE disk[s].slots[i]
  IN [s \in Segments |-> [disk[s] EXCEPT !.slots = [i \in SlotIdx |-> SlotAfter(s, i)]]]

WriterLost ==
  /\ phase' = "down"
  /\ wseg' = 1
  /\ wslot' = 0
  /\ nextSeq' = 0
  /\ lastId' = Genesis
  /\ published' = 0
  /\ inflight' = <<>>
  /\ rolling' = FALSE
  /\ rollAcked' = 0

Crash ==
  /\ phase = "running"
  /\ \E outcome \in [Pending -> {"whole", "torn", "lost"}] :
       disk' = AfterCrash(outcome)
  /\ WriterLost
  /\ UNCHANGED <<ckpt, life, acknowledged, lineage, retired, damaged>>

(* A crash inside create_segment(), where a roll would start: the new     *)
(* file exists but its header is not durable.                              *)
CrashCreatingSegment ==
  /\ RollEnabled
  /\ disk[2].header = "none"
  /\ \E outcome \in [Pending -> {"whole", "torn", "lost"}] :
       disk' = [AfterCrash(outcome) EXCEPT ![2] = HeaderlessSegment]
  /\ WriterLost
  /\ UNCHANGED <<ckpt, life, acknowledged, lineage, retired, damaged>>

(* Log::open(): plan recovery; if it does not refuse, apply the plan and   *)
(* start writing with a new life right after the chain's end, from         *)
(* plan_.last_sequence and plan_.last_crc (Log::Log). start_writing()'s    *)
(* own case for an empty chain (chain_batches == 0 && first_sequence == 0) *)
(* never applies after walk_chain(), which sets plan_.first_sequence. The  *)
(* chain recovered is reported durable (durable_lsns_ start at its end).   *)
Reopen ==
  /\ phase = "down"
  /\ life < MaxLife
  /\ LET r == Recover(disk) IN
       /\ ~r.refused
       /\ disk' = ApplyPlan(disk, r)
       /\ wseg' = r.endSeg
       /\ wslot' = r.endSlot
       /\ nextSeq' = r.lastSeq + 1
       /\ lastId' = r.lastId
       /\ published' = r.lastSeq
       /\ acknowledged' = acknowledged \cup ChainIds(r)
       /\ lineage' = ChainIds(r)
  /\ phase' = "running"
  /\ life' = life + 1
  /\ inflight' = <<>>
  /\ rolling' = FALSE
  /\ rollAcked' = 0
  /\ UNCHANGED <<ckpt, retired, damaged>>

(* Bit rot while the process is down: an acknowledged batch becomes        *)
(* unreadable, and the log holds proof that it was acknowledged.           *)
Damage ==
  /\ phase = "down"
  /\ damaged < MaxDamage
  /\ \E s \in Segments, i \in SlotIdx :
       /\ ValidAt(disk, s, i)
       /\ IdOf(disk[s].slots[i]) \in acknowledged
       /\ \E t \in Segments, j \in SlotIdx :
            /\ <<t, j>> # <<s, i>>
            /\ ValidAt(disk, t, j)
            /\ disk[t].slots[j].acked >= disk[s].slots[i].sequence
       /\ disk' = [disk EXCEPT ![s].slots[i] = Torn]
  /\ damaged' = damaged + 1
  /\ UNCHANGED <<ckpt, phase, life, acknowledged, lineage, retired>>
  /\ UNCHANGED writer

(* The checkpointer (Retire only): checkpoints now cover everything        *)
(* published, so keep_from_sequence is published_sequence_ + 1; the run    *)
(* store keeps it durably, and recovery gets it as first_sequence_max.     *)
Checkpoint ==
  /\ Retire
  /\ phase = "running"
  /\ ckpt < published + 1
  /\ ckpt' = published + 1
  /\ UNCHANGED <<disk, phase, life, acknowledged, lineage, retired, damaged>>
  /\ UNCHANGED writer

(* Log::retire(keep_from): segment 1 goes once segment 2's first_sequence  *)
(* is at most keep_from (read_segments_[1].first_sequence <= keep_from).   *)
RetireSegment ==
  /\ Retire
  /\ phase = "running"
  /\ wseg = 2
  /\ disk[1].header = "valid"
  /\ disk[2].first <= ckpt
  /\ disk' = [disk EXCEPT ![1] = NoSegment]
  /\ retired' = retired \cup {a \in acknowledged : a.sequence < disk[2].first}
  /\ UNCHANGED <<ckpt, phase, life, acknowledged, lineage, damaged>>
  /\ UNCHANGED writer

(* Some write in flight completes. *)
CompleteWrite == \E k \in 1..Len(inflight) : Complete(k)

Next ==
  \/ Seal
  \/ Roll
  \/ SealAfterRoll
  \/ CompleteWrite
  \/ Crash
  \/ CrashCreatingSegment
  \/ Reopen
  \/ Damage
  \/ Checkpoint
  \/ RetireSegment

Spec == Init /\ [][Next]_vars

-----------------------------------------------------------------------------
(***************************************************************************)
(* Invariants.                                                             *)
(***************************************************************************)

SlotValues == {Zero, Torn} \cup
  [kind : {"batch"}, sequence : 1..MaxSeq, prev : [sequence : 0..MaxSeq, life : 0..MaxLife],
   acked : 0..MaxSeq, life : 1..MaxLife, roll : BOOLEAN, salt : 0..MaxLife]

TypeOK ==
  /\ \A s \in Segments :
       /\ disk[s].header \in {"none", "valid", "damaged"}
       /\ \A i \in SlotIdx : disk[s].slots[i] \in SlotValues
  /\ phase \in {"running", "down"}
  /\ life \in 1..MaxLife
  /\ wseg \in Segments /\ wslot \in 0..Slots
  /\ published \in 0..MaxSeq
  /\ Len(inflight) <= WritesInFlightMax + 1
  \* at most two writes in flight at the device
  /\ Cardinality(Pending) <= WritesInFlightMax
  /\ ckpt \in 1..(MaxSeq + 1)

Recovered == Recover(disk)

(* (1) Every acknowledged batch is in the recovered log, or recovery      *)
(* refuses. (A batch retired with segment 1 is covered by a checkpoint.)   *)
AckedInRecoveredLog ==
  Recovered.refused \/ acknowledged \subseteq ChainIds(Recovered) \cup retired

(* (2) Recovery never accepts a batch outside the current chain: each     *)
(* batch it keeps was sealed by this life or kept by the recovery this     *)
(* life started from, and the sequences run without a hole from the        *)
(* oldest segment's first_sequence.                                        *)
OnlyTheChain ==
  LET r == Recovered
  IN ~r.refused =>
       \A k \in 1..Len(r.chain) :
         /\ IdOf(r.chain[k]) \in lineage
         /\ r.chain[k].sequence = r.first + k - 1

(* (3) A crash that damaged no acknowledged data never refuses. *)
NoRefusalWithoutDamage == damaged = 0 => ~Recovered.refused

(* (4) Recovering twice gives the same log: planning again after the plan  *)
(* was applied gives the same plan. (A crash inside apply_recovery leaves  *)
(* the disk either as it was or as applied: the model deletes at most one  *)
(* file, segment 2.)                                                       *)
RecoveryIdempotent ==
  LET r == Recovered
  IN ~r.refused => Recover(ApplyPlan(disk, r)) = r

=============================================================================
