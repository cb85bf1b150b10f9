------------------------------ MODULE FuseeLog ------------------------------
(***************************************************************************)
(* The shared log's writer, crashes, damage, reopening and recovery rule.  *)
(*                                                                         *)
(* The code this states: wal/log.cpp (Log::seal_next, roll_segment,        *)
(* complete: how a batch gets its sequence, prev_crc, acked and life; at   *)
(* most kWritesInFlightMax = 2 writes in flight; publication in order),    *)
(* wal/log_prepare.cpp and wal/segment_file.cpp (the next segment prepared *)
(* ahead of the roll), wal/recovery.cpp (the Planner: load_segments,       *)
(* walk_chain, check_size, probe, check_blob_refs, scan_past_end,          *)
(* choose_deletions; apply_recovery), wal/log_retire.cpp (Log::retire,     *)
(* retire_blob_files) and wal/log_blobs.cpp, wal/blob_store.cpp (blob      *)
(* files). Prose: docs/durability.md, docs/log-format.md sections 7 to 9,  *)
(* docs/spec.md.                                                           *)
(*                                                                         *)
(* Abstraction choices                                                     *)
(*                                                                         *)
(* - MaxSegment segment files, numbered 1 to MaxSegment. A segment is a    *)
(*   header (valid, damaged, zeroed, or no file at all), a salt,           *)
(*   first_sequence, prev (the header's prev_crc), whether the file still  *)
(*   has its preallocated size (`whole`) and Slots batch slots. Every      *)
(*   batch takes exactly one slot (one block); the last slot of a segment  *)
(*   is the block the writer keeps free for the roll marker. The writer    *)
(*   never rolls out of segment MaxSegment, and MaxSeq bounds the          *)
(*   sequences it seals.                                                   *)
(* - Recovery reads nothing of a segment whose header is not valid but the *)
(*   header, and such a header becomes valid again only by the roll's      *)
(*   header write into a prepared file, whose slots are zeros. So the      *)
(*   model keeps only the header of such a segment (HeaderOnly): its slots *)
(*   are zeros whatever the disk holds.                                    *)
(* - A slot holds zeros (preallocated, never written), torn bytes or a     *)
(*   batch. Torn bytes come in two kinds: Torn, where no batch header      *)
(*   decodes, and a batch whose header landed but whose CRC fails          *)
(*   (whole = FALSE: the rest of the block did not land, or rotted). Only  *)
(*   the CRC tells the second kind from a batch. Bytes from an earlier     *)
(*   life of the log are simply batches that a crash left behind: recovery *)
(*   dropped them, the next life did not overwrite them (yet).             *)
(* - prev_crc is modelled as the identity of the previous batch:           *)
(*   [sequence, life]. A life seals each sequence at most once, and the    *)
(*   CRC covers sequence and life, so this is the CRC under the assumption *)
(*   that CRC-32C never collides. Segment 1's header has prev Genesis (the *)
(*   prev_crc 0); a later segment's header has its roll marker's identity. *)
(* - The salt is modelled as the life that wrote the segment's header (a   *)
(*   life writes a segment's header at most once, since it only rolls      *)
(*   forward; segment 1 is created before life 1 with salt 0). A batch     *)
(*   verifies only in a segment whose salt it carries.                     *)
(* - `disk` is what is durable. A write completes only once durable        *)
(*   (O_DIRECT + RWF_DSYNC, or write + fdatasync), so completion puts the  *)
(*   batch on the disk. A crash resolves each write still in flight: it    *)
(*   lands whole, torn with no header, torn with its header, or not at     *)
(*   all.                                                                  *)
(* - Directory entries (wal/io/file_system.hpp): a remove is durable only  *)
(*   after the directory's sync. `unlinked` lists, in order, the segment   *)
(*   files removed from the directory whose removal is not durable yet:    *)
(*   the process no longer sees them, the disk still holds them. A crash   *)
(*   keeps the first k of those removals, for any k (a journal keeps a     *)
(*   prefix of the directory's changes; the tests' FaultFileSystem keeps   *)
(*   all or none). Every sync of the log directory (retirement's, the      *)
(*   preparer's, apply_recovery's) makes them all durable.                 *)
(* - The process can also stop while the machine stays up (Restart: it     *)
(*   poisoned and was reopened, or was killed): its writes in flight land  *)
(*   whole or not at all, and the removals not yet durable stay as they    *)
(*   are, not visible and not durable, into the next life. A machine crash *)
(*   later resolves them. Restart is taken only while a removal is         *)
(*   pending; otherwise it is a Crash.                                     *)
(* - The next segment is prepared ahead of the roll, off the write path    *)
(*   (Prepare), in the steps of prepare_segment_file: open the file under  *)
(*   its final name, creating it if it is not there, truncate it to        *)
(*   nothing, allocate, sync its data, zero-fill it, sync the directory.   *)
(*   Whatever lay under that name, its bytes are gone once the first data  *)
(*   sync is done: before it, a crash leaves the old file as it was (or no *)
(*   file), after it the header reads as zeroed (a short file reads as     *)
(*   zeros past its end; the directory entry of a new file is durable only *)
(*   with the final sync). Those are the states before and after Prepare,  *)
(*   so Prepare is one step over whatever file lies there. The roll (Roll) *)
(*   writes the new header into the prepared file durably and only then    *)
(*   the roll marker into the old segment; a crash during the header write *)
(*   leaves the header zeroed, torn (damaged; CrashWritingHeader) or       *)
(*   valid. Roll takes the prepared file only once Prepare is done,        *)
(*   directory sync included: a marker must never outlive its successor's  *)
(*   name. At any time at most one prepared segment lies past the write    *)
(*   segment. A roll that comes before the preparation is done takes the   *)
(*   file unfinished (full size and synced, zeros in part, the rest        *)
(*   unwritten extents that read as zeros) and syncs the directory after   *)
(*   writing the header, before the marker; a roll that finds nothing      *)
(*   prepared (never begun, failed, or too small) runs                     *)
(*   prepare_segment_file over whatever lies there, without the zeros      *)
(*   (create_segment_unzeroed), syncs the directory and writes the header. *)
(*   Each leaves no file or a zeroed header until the header write and the *)
(*   name durable before the marker: the same states, so Roll after        *)
(*   Prepare stands for all of them.                                       *)
(* - A failed write poisons the log (P5): nothing after it is published.   *)
(*   Seen from the disk that is a crash whose in-flight writes may still   *)
(*   land, so it is not modelled apart. The close marker is a batch sealed *)
(*   with nothing in flight (acked = sequence - 1); such batches are       *)
(*   modelled, a clean close is not modelled apart.                        *)
(* - The batch that triggers a roll captures `acked` (published_sequence_) *)
(*   in seal_next before the roll (SealOverflows); writes in flight may    *)
(*   complete while it holds seal_mu_, and roll_segment reads              *)
(*   published_sequence_ again for the marker (Roll). The batch is sealed  *)
(*   after the marker (SealAfterRoll) with the value it captured, which    *)
(*   may be smaller than the marker's: as the code does.                   *)
(* - Reopening (Log::open) plans recovery from the files the directory     *)
(*   shows, then apply_recovery removes the segments past the end (highest *)
(*   first) and the retired leading ones, each removal followed by a       *)
(*   directory sync (ApplyRemove, ApplySync), then syncs the directory     *)
(*   once more, even when it removed nothing (ApplySyncLast): a removal an *)
(*   earlier life of the same boot made and did not sync becomes durable   *)
(*   before anything is built on the plan. A crash or a Restart can come   *)
(*   between any two of these steps. Then the blob files the chain does    *)
(*   not reference go, and only then does the new life start writing       *)
(*   (StartWriting).                                                       *)
(* - Blob files (only when Blobs > 0): a batch may carry a reference to    *)
(*   the current blob file (BlobWriter::file_number_); the blob and its    *)
(*   file are durable before the batch is sealed. BlobRoll moves the       *)
(*   current file on. The log keeps, for each blob file, the newest        *)
(*   segment of a published batch referencing it                          *)
(*   (blob_file_last_segment_). Retirement removes a blob file (and syncs  *)
(*   the blob directory) once that segment is retired, the file is not the *)
(*   current one and no unpublished batch references it (RetireBlob).      *)
(*   Recovery refuses a chain batch whose blob file is missing             *)
(*   (check_blob_refs) and removes the blob files the chain does not       *)
(*   reference; the next BlobWriter starts one past the highest file left. *)
(*   Blob bytes are not damaged, a blob file's removal is one step (its    *)
(*   directory is synced right after it), and the gap between reserving a  *)
(*   blob and staging its reference is not modelled (a batch references    *)
(*   the current file at its seal; BlobWriter::in_use covers that gap,     *)
(*   tests/wal/blob_retire_race_test.cpp tests it).                        *)
(* - Records, sections, shards and LSNs are not modelled: a batch that     *)
(*   passes its CRC always decodes, so the refusals for bodies that do not *)
(*   decode and for LSN gaps are out of scope.                             *)
(* - Damage happens while the process is down, at most MaxDamage times     *)
(*   (every configuration uses one: two events can erase each other's      *)
(*   evidence, e.g. bit rot in segment 1 and then rot of the header of the *)
(*   segment holding the only batch whose acked proves it, which no rule   *)
(*   can detect). Its kinds:                                               *)
(*   RotBatch: an acknowledged batch fails its CRC, when the log still     *)
(*     holds proof that it was acknowledged (a valid batch whose acked     *)
(*     reaches its sequence). Damage to the newest acknowledged batch with *)
(*     no later batch sealed after its acknowledgement cannot be told from *)
(*     a torn write by any rule (docs/durability.md); it is left out.      *)
(*   RotHeader: a valid segment header becomes damaged, or reads as zeros  *)
(*     (a lost block, or a file truncated to nothing).                     *)
(*   LoseSegment: a segment file vanishes.                                 *)
(*   TruncateSegment: a file is cut short after its header, so it is       *)
(*     shorter than its header's segment_bytes (check_size) and the slots  *)
(*     past the cut read as zeros.                                         *)
(* - Retirement (Log::retire with the checkpointer's keep_from_sequence,   *)
(*   recovery's first_sequence_max) only when the constant Retire is TRUE. *)
(*   The checkpointer is the most eager one, whose checkpoints cover       *)
(*   everything published (keep_from_sequence = published_sequence_ + 1).  *)
(*   Log::retire takes the steps of wal/log_retire.cpp, and a crash or a   *)
(*   Restart may come between any two: zero the oldest live segment's      *)
(*   header and sync it (RetireZeroHeader; a crash during that write tears *)
(*   the header: CrashRetiring), remove the file (RetireUnlink), sync the  *)
(*   directory (RetireSyncDir), and after the segments the blob files only *)
(*   they referenced (RetireBlob). With RetireFails also TRUE, a step may  *)
(*   fail while the process goes on (RetireZeroFails, RetireRemoveFails),  *)
(*   leaving the segment in retiring_, and the next retirement finishes it *)
(*   before it takes any other segment (FuseeLogRetireFails.cfg).          *)
(*   FuseeLogRetireSkips.cfg weakens this back to the code before ed818e5, *)
(*   which forgot the segment and took the next one (docs/spec.md).        *)
(*                                                                         *)
(* The invariants (the numbering of issues 8 and 16)                       *)
(*   (1) AckedInRecoveredLog: every acknowledged batch is in the recovered *)
(*       log or covered by the checkpoints, or recovery refuses.           *)
(*   (2) OnlyTheChain: recovery never accepts a batch outside the current  *)
(*       chain (stale or earlier-life bytes).                              *)
(*   (3) NoRefusalWithoutDamage: a crash that damaged nothing never        *)
(*       refuses.                                                          *)
(*   (4) RecoveryIdempotent: recovering again, also after a crash part-way *)
(*       through applying the plan, gives the same log.                    *)
(*   (5) ChainChecksummed: every batch of the recovered chain is whole and *)
(*       passes its CRC with its segment's salt.                           *)
(*   (6) CheckpointAcked: every sequence the checkpoints cover (below      *)
(*       first_sequence_max) was acknowledged.                             *)
(* Each of (1) to (5) is checked in every reachable state, for every way a *)
(* crash now could resolve the removals not yet durable: recovery of the   *)
(* disk as it stands is recovery after a crash that lands none of the      *)
(* writes in flight; the other outcomes are the states after the crash     *)
(* actions.                                                                *)
(***************************************************************************)
EXTENDS Naturals, Sequences, FiniteSets, TLC

CONSTANTS
  Slots,      \* batch slots per segment, the roll marker's slot included
  MaxSegment, \* segment files 1..MaxSegment (MaxSegment - 1 rolls at most)
  MaxSeq,     \* the writer seals no sequence above this
  MaxLife,    \* lives (opens) of the log; each may crash, the last is not
              \*   reopened, so recovery is checked after up to MaxLife crashes
  MaxDamage,  \* damage events (bit rot, header rot, lost or truncated files)
  Retire,     \* whether segments may be retired (BOOLEAN)
  RetireFails,\* whether a retire step may fail while the process goes on
  Restarts,   \* whether the process may stop while the machine stays up
  Blobs       \* blob files 1..Blobs; 0: no batch carries a blob reference

ASSUME /\ Slots \in Nat /\ Slots >= 2
       /\ MaxSegment \in Nat /\ MaxSegment >= 1
       /\ MaxSeq \in Nat /\ MaxSeq >= 1
       /\ MaxLife \in Nat /\ MaxLife >= 1
       /\ MaxDamage \in Nat
       /\ Retire \in BOOLEAN
       /\ RetireFails \in BOOLEAN
       /\ Blobs \in Nat
       /\ Restarts \in BOOLEAN

WritesInFlightMax == 2          \* kWritesInFlightMax (wal/limits.hpp)
Segments == 1..MaxSegment
SlotIdx == 0..(Slots - 1)
MarkerSlot == Slots - 1         \* the block kept free for the roll marker
BlobFiles == 1..Blobs

(* What a batch's CRC stands for, and so what prev_crc names. *)
Id(sequence, life) == [sequence |-> sequence, life |-> life]
Genesis == Id(0, 0)             \* segment 1's header prev_crc: 0

(* Slot contents. One record shape for all, so TLC can compare them. `blob` *)
(* is the blob file a batch references (0: none).                          *)
Bytes(kind) == [kind |-> kind, sequence |-> 0, prev |-> Genesis, acked |-> 0,
                life |-> 0, roll |-> FALSE, salt |-> 0, whole |-> FALSE,
                blob |-> 0]
Zero == Bytes("zero")           \* preallocated zeros: the clean end
Torn == Bytes("torn")           \* no batch header decodes
Batch(sequence, life, prev, acked, roll, salt, blob) ==
  [kind |-> "batch", sequence |-> sequence, prev |-> prev, acked |-> acked,
   life |-> life, roll |-> roll, salt |-> salt, whole |-> TRUE, blob |-> blob]
(* The header landed and decodes; the rest did not land, or rotted. *)
Broken(b) == [b EXCEPT !.whole = FALSE]
IdOf(b) == Id(b.sequence, b.life)

(* A segment whose header is not valid, or no file ("none"). *)
HeaderOnly(status) ==
  [header |-> status, salt |-> 0, first |-> 0, prev |-> Genesis, whole |-> TRUE,
   slots |-> [i \in SlotIdx |-> Zero]]
NoSegment == HeaderOnly("none")
Prepared == HeaderOnly("zeroed")  \* created and zero-filled, header not written
NewSegment(salt, first, prev) ==
  [header |-> "valid", salt |-> salt, first |-> first, prev |-> prev, whole |-> TRUE,
   slots |-> [i \in SlotIdx |-> Zero]]

VARIABLES
  disk,         \* [Segments -> segment]: what is durable
  unlinked,     \* segment files removed from the directory, not durably yet,
                \*   in the order of their removal
  blobs,        \* [BlobFiles -> BOOLEAN]: the blob files there are (durable)
  ckpt,         \* first_sequence_max: what the run store's checkpoints need
  phase,        \* "running", "opening" (apply_recovery under way) or "down"
                \*   (crashed or stopped, not yet reopened)
  life,         \* the current life (the last one while down)
  dels,         \* opening: the segment files apply_recovery has yet to
                \*   remove, then SyncLast for its closing directory sync
  wseg, wslot,  \* write_segment and write_offset: where the next batch goes
  nextSeq,      \* next_sequence_
  lastId,       \* last_crc_: identity of the last batch sealed
  published,    \* published_sequence_: the highest sequence acknowledged
  inflight,     \* in_flight_: writes sealed and not yet published, in order
  sealing,      \* a batch that does not fit captured its acked (rollAcked),
                \*   and the roll has not sealed the marker yet
  rolling,      \* a roll marker is sealed, the batch that triggered it not yet
  rollAcked,    \* the acked that batch captured before the roll
  rseg,         \* read_segments_.front(): the oldest segment not being retired
  retiring,     \* retiring_: the segment Log::retire took out of read_segments_
                \*   and has not removed yet, mid-call or after a failed step
                \*   (0: none)
  bcur,         \* BlobWriter's current file (Blobs + 1: no file left)
  bnewest,      \* blob_file_last_segment_: [BlobFiles -> newest segment of a
                \*   published batch referencing the file] (0: no entry)
  acknowledged, \* ghost: identities of every batch ever reported durable
  lineage,      \* ghost: identities of the chain this life builds on, and
                \*   of every batch this life sealed
  damaged       \* ghost: damage events so far

vars == <<disk, unlinked, blobs, ckpt, phase, life, dels, wseg, wslot, nextSeq,
          lastId, published, inflight, sealing, rolling, rollAcked, rseg,
          retiring, bcur, bnewest, acknowledged, lineage, damaged>>
writer == <<wseg, wslot, nextSeq, lastId, published, inflight, sealing,
            rolling, rollAcked, rseg, retiring, bcur, bnewest>>

-----------------------------------------------------------------------------
(***************************************************************************)
(* Directory entries.                                                      *)
(***************************************************************************)

Range(q) == {q[j] : j \in 1..Len(q)}

(* The disk after the first k removals of u became durable. *)
KeepFirst(d, u, k) ==
  [s \in Segments |-> IF \E j \in 1..k : u[j] = s THEN NoSegment ELSE d[s]]

(* What the directory shows (every removal done), and what it holds after  *)
(* a sync (every removal durable).                                         *)
Visible(d, u) == KeepFirst(d, u, Len(u))

(* Every disk a machine crash now could leave. *)
CrashDisks(d, u) == {KeepFirst(d, u, k) : k \in 0..Len(u)}

-----------------------------------------------------------------------------
(***************************************************************************)
(* The recovery rule (wal/recovery.cpp, Planner).                          *)
(***************************************************************************)

(* A batch header decodes at slot i of a segment whose header is valid. *)
Decodes(d, s, i) ==
  /\ d[s].header = "valid"
  /\ d[s].slots[i].kind = "batch"

(* Its CRC holds with the salt of the segment holding it. *)
Verifies(d, s, i) ==
  /\ d[s].slots[i].whole
  /\ d[s].slots[i].salt = d[s].salt

ValidAt(d, s, i) == Decodes(d, s, i) /\ Verifies(d, s, i)

(* probe() returns `valid`: the batch continues the chain. The code checks *)
(* sequence and prev_crc before the CRC.                                   *)
Continues(d, s, i, expSeq, expPrev) ==
  /\ Decodes(d, s, i)
  /\ d[s].slots[i].sequence = expSeq
  /\ d[s].slots[i].prev = expPrev
  /\ Verifies(d, s, i)

(* walk_chain() after a valid roll marker b in segment s: the next segment *)
(* was durable before b was written, so it must be there, with a valid     *)
(* header that continues the chain, at its preallocated size (check_size), *)
(* or recovery refuses.                                                    *)
MarkerRefuses(d, s, b) ==
  \/ s + 1 \notin Segments
  \/ d[s + 1].header # "valid"
  \/ d[s + 1].first # b.sequence + 1
  \/ d[s + 1].prev # IdOf(b)
  \/ ~d[s + 1].whole
RefuseAtMarker == TRUE

Walked(refused, chain, homes, s, i) ==
  [refused |-> refused, chain |-> chain, homes |-> homes, endSeg |-> s,
   endSlot |-> i]

(* walk_chain(): follow the chain from (s, i), expecting sequence expSeq   *)
(* and prev expPrev. It stops at the first slot that does not continue     *)
(* the chain (zeros, torn, stale, an earlier life, a foreign salt) or at   *)
(* the segment's end. accept() refuses a batch whose blob file is missing  *)
(* (check_blob_refs; bl: the blob files there are). `homes` is the segment *)
(* each batch of the chain lies in.                                        *)
RECURSIVE Walk(_, _, _, _, _, _, _, _)
Walk(d, bl, s, i, expSeq, expPrev, chain, homes) ==
  IF i > MarkerSlot \/ ~Continues(d, s, i, expSeq, expPrev)
  THEN Walked(FALSE, chain, homes, s, i)
  ELSE LET b == d[s].slots[i]
           chain2 == Append(chain, b)
           homes2 == Append(homes, s)
       IN IF b.blob # 0 /\ ~bl[b.blob]
          THEN Walked(TRUE, chain, homes, s, i)
          ELSE IF ~b.roll
          THEN Walk(d, bl, s, i + 1, b.sequence + 1, IdOf(b), chain2, homes2)
          ELSE IF MarkerRefuses(d, s, b)
               THEN Walked(RefuseAtMarker, chain2, homes2, s, i + 1)
               ELSE Walk(d, bl, s + 1, 0, b.sequence + 1, IdOf(b), chain2, homes2)

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

(* load_segments(): the segment files there are, by number. *)
Present(d) == {s \in Segments : d[s].header # "none"}
Lowest(S) == CHOOSE s \in S : \A t \in S : s <= t
Highest(S) == CHOOSE s \in S : \A t \in S : s >= t
HasGap(d) ==
  Present(d) # {} /\ Present(d) # Lowest(Present(d))..Highest(Present(d))

(* Leading segments a retirement was removing when the process stopped     *)
(* are skipped (and deleted): one whose header is zeroed, and one whose    *)
(* header is damaged when the next one is valid and starts no later than   *)
(* the checkpoints need. A segment is skipped only if another follows.     *)
RECURSIVE SkipRetired(_, _)
SkipRetired(d, s) ==
  IF /\ s + 1 \in Present(d)
     /\ \/ d[s].header = "zeroed"
        \/ /\ d[s].header = "damaged"
           /\ d[s + 1].header = "valid"
           /\ d[s + 1].first <= ckpt
  THEN SkipRetired(d, s + 1)
  ELSE s

(* The oldest segment the chain starts from. *)
Oldest(d) == IF Present(d) = {} THEN 1 ELSE SkipRetired(d, Lowest(Present(d)))

(* plan_recovery() over the segment files d and the blob files bl.         *)
(* `lastSeq` and `lastId` are plan_.last_sequence and plan_.last_crc as    *)
(* walk_chain sets them: an empty chain ends where the oldest segment's    *)
(* header says it starts (first_sequence - 1, prev_crc).                   *)
Recover(d, bl) ==
  LET o == Oldest(d)
      w == Walk(d, bl, o, 0, d[o].first, d[o].prev, <<>>, <<>>)
      n == Len(w.chain)
      last == IF n = 0 THEN d[o].first - 1 ELSE w.chain[n].sequence
      lastId_ == IF n = 0 THEN d[o].prev ELSE IdOf(w.chain[n])
      \* No segment file, a gap in the numbers, an oldest segment whose
      \* header is damaged or zeroed or that was truncated, or a log that
      \* does not reach back as far as the checkpoints need.
      startLost == \/ Present(d) = {}
                   \/ HasGap(d)
                   \/ d[o].header # "valid"
                   \/ d[o].first > ckpt
                   \/ ~d[o].whole
  IN [refused |-> startLost \/ w.refused
                  \/ PastEndRefuses(d, w.endSeg, w.endSlot, last),
      oldest |-> o,
      first |-> d[o].first,
      chain |-> w.chain,
      homes |-> w.homes,
      endSeg |-> w.endSeg,
      endSlot |-> w.endSlot,
      lastSeq |-> last,
      lastId |-> lastId_]

(* choose_deletions(): the segments past the end segment, highest first,   *)
(* then the retired leading ones, lowest first. apply_recovery() removes   *)
(* them one at a time (remove, sync the directory). Bytes past the end     *)
(* inside the end segment stay.                                            *)
RECURSIVE Descending(_)
Descending(S) == IF S = {} THEN <<>>
                 ELSE <<Highest(S)>> \o Descending(S \ {Highest(S)})
RECURSIVE Ascending(_)
Ascending(S) == IF S = {} THEN <<>>
                ELSE <<Lowest(S)>> \o Ascending(S \ {Lowest(S)})
PastEndOrder(S) == Descending(S)
Deletions(d, r) ==
  PastEndOrder({s \in Present(d) : s > r.endSeg})
    \o Ascending({s \in Present(d) : s < r.oldest})

(* What apply_recovery() has to do for the deletions ds: remove each and   *)
(* sync the directory, then sync the directory once more (SyncLast), even  *)
(* when ds is empty. FuseeLogWeak.tla substitutes the code before that     *)
(* last sync, whose only directory syncs followed its removals.            *)
SyncLast == 0
ApplySteps(ds) == ds \o <<SyncLast>>

(* The disk after apply_recovery() deleted the first k of them. *)
ApplyFirst(d, dels_, k) ==
  LET gone == {dels_[j] : j \in 1..k}
  IN [s \in Segments |-> IF s \in gone THEN NoSegment ELSE d[s]]

ChainIds(r) == {IdOf(r.chain[k]) : k \in 1..Len(r.chain)}

(* The blob files the chain references: plan_.blob_file_last_segment, the  *)
(* newest segment of a chain batch referencing each (0: not referenced).   *)
ChainBlobNewest(r) ==
  [f \in BlobFiles |->
     LET hs == {r.homes[k] : k \in {j \in 1..Len(r.chain) : r.chain[j].blob = f}}
     IN IF hs = {} THEN 0 ELSE Highest(hs)]

-----------------------------------------------------------------------------
(***************************************************************************)
(* The writer (wal/log.cpp).                                               *)
(***************************************************************************)

Init ==
  /\ disk = [s \in Segments |-> IF s = 1 THEN NewSegment(0, 1, Genesis)
                                         ELSE NoSegment]
  /\ unlinked = <<>>
  /\ blobs = [f \in BlobFiles |-> FALSE]
  /\ ckpt = 1
  /\ phase = "running"
  /\ life = 1
  /\ dels = <<>>
  /\ wseg = 1
  /\ wslot = 0
  /\ nextSeq = 1
  /\ lastId = Genesis
  /\ published = 0
  /\ inflight = <<>>
  /\ sealing = FALSE
  /\ rolling = FALSE
  /\ rollAcked = 0
  /\ rseg = 1
  /\ retiring = 0
  /\ bcur = 1
  /\ bnewest = [f \in BlobFiles |-> 0]
  /\ acknowledged = {}
  /\ lineage = {}
  /\ damaged = 0

(* The blob reference a batch sealed now may carry: none, or a blob in the *)
(* current blob file. The blob thread wrote it, its file created with a    *)
(* directory sync, and synced it before the reference could be sealed.     *)
BlobChoice == {0} \cup (IF bcur \in BlobFiles THEN {bcur} ELSE {})
WithBlob(f) == IF f = 0 THEN blobs ELSE [blobs EXCEPT ![f] = TRUE]

(* seal_next(): the next batch gets sequence next_sequence_, prev_crc      *)
(* last_crc_, acked as given, this life, the write segment's salt and      *)
(* blob reference f; its write is submitted at the write position.         *)
SealAt(acked, f) ==
  LET b == Batch(nextSeq, life, lastId, acked, FALSE, disk[wseg].salt, f)
  IN /\ inflight' = Append(inflight, [batch |-> b, seg |-> wseg,
                                      slot |-> wslot, done |-> FALSE])
     /\ nextSeq' = nextSeq + 1
     /\ lastId' = IdOf(b)
     /\ wslot' = wslot + 1
     /\ lineage' = lineage \cup {IdOf(b)}
     /\ blobs' = WithBlob(f)

(* has_work_locked(): fewer than two writes sealed and not yet published.  *)
(* The batch fits: it leaves the last block free for the roll marker.      *)
Seal ==
  /\ phase = "running"
  /\ ~rolling
  /\ Len(inflight) < WritesInFlightMax
  /\ nextSeq <= MaxSeq
  /\ wslot < MarkerSlot
  /\ \E f \in BlobChoice : SealAt(published, f)
  /\ UNCHANGED <<disk, unlinked, ckpt, phase, life, dels, wseg, published,
                 sealing, rolling, rollAcked, rseg, retiring, bcur, bnewest,
                 acknowledged, damaged>>

(* BlobWriter::reserve rolls to the next blob file (the current one holds  *)
(* a blob and the next would take it past file_bytes_max).                 *)
BlobRoll ==
  /\ phase = "running"
  /\ bcur \in BlobFiles
  /\ blobs[bcur]
  /\ bcur' = bcur + 1
  /\ UNCHANGED <<disk, unlinked, blobs, ckpt, phase, life, dels, wseg, wslot,
                 nextSeq, lastId, published, inflight, sealing, rolling,
                 rollAcked, rseg, retiring, bnewest, acknowledged, lineage,
                 damaged>>

(* The preparer (prepare_segment_file): the segment after the write        *)
(* segment is opened under its final name, created if the directory shows  *)
(* no file there, truncated, allocated, synced, zero-filled, and the       *)
(* directory synced. Whatever file lay there before, its header now reads  *)
(* as zeroed and stays so until the roll; the directory sync makes every   *)
(* removal before it durable.                                              *)
Prepare ==
  /\ phase = "running"
  /\ wseg + 1 \in Segments
  /\ ~(disk[wseg + 1].header = "zeroed" /\ wseg + 1 \notin Range(unlinked))
  /\ disk' = [Visible(disk, unlinked) EXCEPT ![wseg + 1] = Prepared]
  /\ unlinked' = <<>>
  /\ UNCHANGED <<blobs, ckpt, phase, life, dels, acknowledged, lineage, damaged>>
  /\ UNCHANGED writer

(* seal_next(): the batch does not fit. It has taken its records and       *)
(* captured acked = published_sequence_ under mu_; still holding seal_mu_  *)
(* it calls roll_segment. Writes in flight may complete meanwhile.         *)
SealOverflows ==
  /\ phase = "running"
  /\ ~rolling
  /\ ~sealing
  /\ Len(inflight) < WritesInFlightMax
  /\ wseg + 1 \in Segments
  /\ wslot = MarkerSlot
  /\ nextSeq + 1 <= MaxSeq
  /\ sealing' = TRUE
  /\ rollAcked' = published
  /\ UNCHANGED <<disk, unlinked, blobs, ckpt, phase, life, dels, wseg, wslot,
                 nextSeq, lastId, published, inflight, rolling, rseg, retiring,
                 bcur, bnewest, acknowledged, lineage, damaged>>

(* roll_segment(): seal the marker (acked is published_sequence_, read     *)
(* again now), write the prepared segment's header durably with a new      *)
(* salt, first_sequence = marker + 1 and prev = the marker, then write the *)
(* marker into the kept block; the batch that triggered the roll is sealed *)
(* into the new segment once the marker's write has completed              *)
(* (SealAfterRoll).                                                        *)
RollEnabled ==
  /\ phase = "running"
  /\ sealing
  /\ disk[wseg + 1].header = "zeroed"
  /\ wseg + 1 \notin Range(unlinked)

Roll ==
  /\ RollEnabled
  /\ LET m == Batch(nextSeq, life, lastId, published, TRUE, disk[wseg].salt, 0)
     IN /\ disk' = [disk EXCEPT ![wseg + 1] = NewSegment(life, nextSeq + 1, IdOf(m))]
        /\ inflight' = Append(inflight, [batch |-> m, seg |-> wseg,
                                         slot |-> MarkerSlot, done |-> FALSE])
        /\ lastId' = IdOf(m)
        /\ lineage' = lineage \cup {IdOf(m)}
  /\ nextSeq' = nextSeq + 1
  /\ wseg' = wseg + 1
  /\ wslot' = 0
  /\ sealing' = FALSE
  /\ rolling' = TRUE
  /\ UNCHANGED <<unlinked, blobs, ckpt, phase, life, dels, published, rollAcked,
                 rseg, retiring, bcur, bnewest, acknowledged, damaged>>

(* The acked the batch that triggered the roll carries: the value it       *)
(* captured before the roll (FuseeLogWeak.tla substitutes another).        *)
AfterRollAcked == rollAcked

(* The marker is written synchronously under seal_mu_ (no other batch is   *)
(* sealed meanwhile); right after it completes, the same seal_next() seals *)
(* the pending batch, even with the marker still unpublished behind the    *)
(* other write: in_flight_ may then hold three entries, at most two of     *)
(* them not yet durable.                                                   *)
SealAfterRoll ==
  /\ phase = "running"
  /\ rolling
  /\ \A k \in 1..Len(inflight) : inflight[k].batch.roll => inflight[k].done
  /\ \E f \in BlobChoice : SealAt(AfterRollAcked, f)
  /\ rolling' = FALSE
  /\ UNCHANGED <<disk, unlinked, ckpt, phase, life, dels, wseg, published,
                 sealing, rollAcked, rseg, retiring, bcur, bnewest,
                 acknowledged, damaged>>

(* How many writes at the front have completed: complete() publishes them. *)
DonePrefix(s) ==
  IF \E k \in 1..Len(s) : ~s[k].done
  THEN (CHOOSE k \in 1..Len(s) : ~s[k].done /\ \A j \in 1..(k - 1) : s[j].done) - 1
  ELSE Len(s)

(* published_sequence_ once write k completed and the first n writes of    *)
(* in_flight_ (marked) are published: the last of them.                    *)
PublishTo(marked, n, k) == IF n = 0 THEN published ELSE marked[n].batch.sequence

Max(a, b) == IF a >= b THEN a ELSE b

(* blob_file_last_segment_[f] once batches of the segments hs referencing  *)
(* blob file f are published: the newest segment (FuseeLogWeak.tla        *)
(* substitutes another rule).                                              *)
NewestAfter(old, hs) == IF hs = {} THEN old ELSE Max(old, Highest(hs))

(* complete(): write k is durable. Positions are published strictly in     *)
(* order: the writes at the front that are done leave in_flight_,          *)
(* published_sequence_ moves to the last of them, they are reported        *)
(* durable (acknowledged), and their blob references go into               *)
(* blob_file_last_segment_ (note_blob_refs_published).                     *)
Complete(k) ==
  /\ phase = "running"
  /\ ~inflight[k].done
  /\ LET w == inflight[k]
         marked == [inflight EXCEPT ![k].done = TRUE]
         n == DonePrefix(marked)
     IN /\ disk' = [disk EXCEPT ![w.seg].slots[w.slot] = w.batch]
        /\ inflight' = SubSeq(marked, n + 1, Len(marked))
        /\ published' = PublishTo(marked, n, k)
        /\ acknowledged' = acknowledged \cup {IdOf(marked[j].batch) : j \in 1..n}
        /\ bnewest' = [f \in BlobFiles |->
                         NewestAfter(bnewest[f],
                                     {marked[j].seg : j \in {i \in 1..n : marked[i].batch.blob = f}})]
  /\ UNCHANGED <<unlinked, blobs, ckpt, phase, life, dels, wseg, wslot, nextSeq,
                 lastId, sealing, rolling, rollAcked, rseg, retiring, bcur,
                 lineage, damaged>>

(* Some write in flight completes. *)
CompleteWrite == \E k \in 1..Len(inflight) : Complete(k)

-----------------------------------------------------------------------------
(***************************************************************************)
(* Crashes, restarts and reopening.                                        *)
(***************************************************************************)

(* A crash at any moment: each write in flight (sealed, not completed)     *)
(* lands whole, torn with no header, torn with its header, or not at all   *)
(* (the slot keeps what it held: zeros or an earlier life's batch). The    *)
(* writer's memory is lost.                                                *)
Pending == {k \in 1..Len(inflight) : ~inflight[k].done}

AfterCrash(outcome) ==
  LET SlotAfter(s, i) ==
        IF \E k \in Pending : inflight[k].seg = s /\ inflight[k].slot = i
        THEN LET k == CHOOSE k \in Pending : inflight[k].seg = s /\ inflight[k].slot = i
             IN CASE outcome[k] = "whole"  -> inflight[k].batch
                  [] outcome[k] = "torn"   -> Torn
                  [] outcome[k] = "header" -> Broken(inflight[k].batch)
                  [] OTHER                 -> disk[s].slots[i]
        ELSE disk[s].slots[i]
  IN [s \in Segments |-> [disk[s] EXCEPT !.slots = [i \in SlotIdx |-> SlotAfter(s, i)]]]

Outcomes == [Pending -> {"whole", "torn", "header", "lost"}]

WriterLost ==
  /\ phase' = "down"
  /\ dels' = <<>>
  /\ wseg' = 1
  /\ wslot' = 0
  /\ nextSeq' = 0
  /\ lastId' = Genesis
  /\ published' = 0
  /\ inflight' = <<>>
  /\ sealing' = FALSE
  /\ rolling' = FALSE
  /\ rollAcked' = 0
  /\ rseg' = 1
  /\ retiring' = 0
  /\ bcur' = 1
  /\ bnewest' = [f \in BlobFiles |-> 0]

(* Where a machine crash can come: while the process runs, while           *)
(* apply_recovery has steps to do (removals or its last directory sync),   *)
(* and while the process is down with removals not yet durable (after a    *)
(* Restart). A crash while opening with every step done leaves what a      *)
(* crash just before the last sync can leave (every removal durable).      *)
CrashPhase ==
  \/ phase = "running"
  \/ phase = "opening" /\ dels # <<>>
  \/ phase = "down" /\ unlinked # <<>>

Crash ==
  /\ CrashPhase
  /\ \E outcome \in Outcomes : disk' \in CrashDisks(AfterCrash(outcome), unlinked)
  /\ unlinked' = <<>>
  /\ WriterLost
  /\ UNCHANGED <<blobs, ckpt, life, acknowledged, lineage, damaged>>

(* The process stops, the machine stays up: its writes in flight land or   *)
(* not, and the removals not yet durable stay so. Only while one is        *)
(* pending; otherwise this is a Crash.                                     *)
Restart ==
  /\ Restarts
  /\ phase \in {"running", "opening"}
  /\ unlinked # <<>>
  /\ \E outcome \in [Pending -> {"whole", "lost"}] : disk' = AfterCrash(outcome)
  /\ WriterLost
  /\ UNCHANGED <<unlinked, blobs, ckpt, life, acknowledged, lineage, damaged>>

(* A crash during the roll's durable write of the new segment's header:    *)
(* the header is torn. (Not landed at all, it is still zeroed: a Crash     *)
(* before Roll. Landed, it is valid: a Crash after Roll, before the marker *)
(* completes.)                                                             *)
CrashWritingHeader ==
  /\ RollEnabled
  /\ \E outcome \in Outcomes :
       disk' \in {[d EXCEPT ![wseg + 1] = HeaderOnly("damaged")] :
                    d \in CrashDisks(AfterCrash(outcome), unlinked)}
  /\ unlinked' = <<>>
  /\ WriterLost
  /\ UNCHANGED <<blobs, ckpt, life, acknowledged, lineage, damaged>>

(* Log::open(): plan recovery from the files the directory shows; if it    *)
(* does not refuse, apply the plan (ApplyRemove, ApplySync, ApplySyncLast, *)
(* StartWriting) and start writing with a new life right after the        *)
(* chain's end, from plan_.last_sequence and plan_.last_crc (Log::Log).    *)
(* The chain recovered is reported durable (durable_lsns_ start at its     *)
(* end).                                                                   *)
Reopen ==
  /\ phase = "down"
  /\ life < MaxLife
  /\ LET v == Visible(disk, unlinked)
         r == Recover(v, blobs)
     IN /\ ~r.refused
        /\ dels' = ApplySteps(Deletions(v, r))
        /\ wseg' = r.endSeg
        /\ wslot' = r.endSlot
        /\ nextSeq' = r.lastSeq + 1
        /\ lastId' = r.lastId
        /\ published' = r.lastSeq
        /\ rseg' = r.oldest
        /\ bnewest' = ChainBlobNewest(r)
        /\ acknowledged' = acknowledged \cup ChainIds(r)
        /\ lineage' = ChainIds(r)
  /\ phase' = "opening"
  /\ life' = life + 1
  /\ inflight' = <<>>
  /\ sealing' = FALSE
  /\ rolling' = FALSE
  /\ rollAcked' = 0
  /\ retiring' = 0
  /\ UNCHANGED <<disk, unlinked, blobs, ckpt, bcur, damaged>>

(* apply_recovery(): remove the next file of the plan ...                  *)
ApplyRemove ==
  /\ phase = "opening"
  /\ dels # <<>>
  /\ Head(dels) # SyncLast
  /\ Head(dels) \notin Range(unlinked)
  /\ unlinked' = Append(unlinked, Head(dels))
  /\ UNCHANGED <<disk, blobs, ckpt, phase, life, dels, acknowledged, lineage,
                 damaged>>
  /\ UNCHANGED writer

(* ... and sync the directory, one file at a time.                         *)
ApplySync ==
  /\ phase = "opening"
  /\ dels # <<>>
  /\ Head(dels) # SyncLast
  /\ Head(dels) \in Range(unlinked)
  /\ disk' = Visible(disk, unlinked)
  /\ unlinked' = <<>>
  /\ dels' = Tail(dels)
  /\ UNCHANGED <<blobs, ckpt, phase, life, acknowledged, lineage, damaged>>
  /\ UNCHANGED writer

(* ... then, every file removed, sync the directory once more, even when   *)
(* nothing was removed (wal/recovery.cpp, apply_recovery's last            *)
(* fs.sync_dir): removals that an earlier life of this boot made and did   *)
(* not sync (it stopped between fs.remove and fs.sync_dir, the machine     *)
(* up) become durable. The plan was read from a directory without those    *)
(* files; until then a machine crash would bring them back under a log     *)
(* built as if they were gone (docs/spec.md).                              *)
ApplySyncLast ==
  /\ phase = "opening"
  /\ dels = <<SyncLast>>
  /\ disk' = Visible(disk, unlinked)
  /\ unlinked' = <<>>
  /\ dels' = <<>>
  /\ UNCHANGED <<blobs, ckpt, phase, life, acknowledged, lineage, damaged>>
  /\ UNCHANGED writer

(* Then the blob files the chain does not reference go (removed, the blob  *)
(* directory synced), and start_writing opens the BlobWriter one past the  *)
(* highest blob file left.                                                 *)
StartWriting ==
  /\ phase = "opening"
  /\ dels = <<>>
  /\ LET kept == [f \in BlobFiles |-> blobs[f] /\ bnewest[f] # 0]
         left == {f \in BlobFiles : kept[f]}
     IN /\ blobs' = kept
        /\ bcur' = IF left = {} THEN 1 ELSE Highest(left) + 1
  /\ phase' = "running"
  /\ UNCHANGED <<disk, unlinked, ckpt, life, dels, wseg, wslot, nextSeq, lastId,
                 published, inflight, sealing, rolling, rollAcked, rseg,
                 retiring, bnewest, acknowledged, lineage, damaged>>

(***************************************************************************)
(* Damage, while the process is down, at most MaxDamage events, to the     *)
(* files the directory shows.                                              *)
(***************************************************************************)
DamageStep(d) ==
  /\ phase = "down"
  /\ damaged < MaxDamage
  /\ disk' = d
  /\ damaged' = damaged + 1
  /\ UNCHANGED <<unlinked, blobs, ckpt, phase, life, dels, acknowledged, lineage>>
  /\ UNCHANGED writer

Shown(s) == s \notin Range(unlinked)

(* Bit rot: an acknowledged batch fails its CRC, and the log holds proof   *)
(* that it was acknowledged.                                               *)
RotBatch ==
  \E s \in Segments, i \in SlotIdx :
    /\ Shown(s)
    /\ ValidAt(disk, s, i)
    /\ IdOf(disk[s].slots[i]) \in acknowledged
    /\ \E t \in Segments, j \in SlotIdx :
         /\ <<t, j>> # <<s, i>>
         /\ ValidAt(disk, t, j)
         /\ disk[t].slots[j].acked >= disk[s].slots[i].sequence
    /\ DamageStep([disk EXCEPT ![s].slots[i] = Broken(disk[s].slots[i])])

(* A segment header rots, or reads back as zeros. *)
RotHeader ==
  \E s \in Segments, status \in {"damaged", "zeroed"} :
    /\ Shown(s)
    /\ disk[s].header = "valid"
    /\ DamageStep([disk EXCEPT ![s] = HeaderOnly(status)])

(* A segment file vanishes. *)
LoseSegment ==
  \E s \in Segments :
    /\ Shown(s)
    /\ disk[s].header # "none"
    /\ DamageStep([disk EXCEPT ![s] = NoSegment])

(* A segment file is cut short after its header and slot k. *)
TruncateSegment ==
  \E s \in Segments, k \in SlotIdx :
    /\ Shown(s)
    /\ disk[s].header = "valid"
    /\ disk[s].whole
    /\ DamageStep([disk EXCEPT ![s].whole = FALSE,
                               ![s].slots = [i \in SlotIdx |->
                                              IF i >= k THEN Zero ELSE disk[s].slots[i]]])

(***************************************************************************)
(* Checkpoints and retirement (Retire only).                               *)
(***************************************************************************)

(* The checkpointer: checkpoints now cover everything published, so        *)
(* keep_from_sequence is published_sequence_ + 1; the run store keeps it   *)
(* durably, and recovery gets it as first_sequence_max.                    *)
Checkpoint ==
  /\ Retire
  /\ phase = "running"
  /\ ckpt < published + 1
  /\ ckpt' = published + 1
  /\ UNCHANGED <<disk, unlinked, blobs, phase, life, dels, acknowledged,
                 lineage, damaged>>
  /\ UNCHANGED writer

(* Log::retire(keep_from): the oldest live segment goes once the next      *)
(* one's first_sequence is at most keep_from                               *)
(* (read_segments_[1].first_sequence <= keep_from); the write segment      *)
(* never goes. Not while a segment is being retired: a call that finds     *)
(* retiring_ set finishes that segment first.                              *)
RetireEnabled ==
  /\ Retire
  /\ phase = "running"
  /\ retiring = 0
  /\ rseg < wseg
  /\ disk[rseg + 1].first <= ckpt

(* The segment the next retire step takes up is segment s: the oldest live *)
(* segment, which the call takes out of read_segments_ into retiring_, or  *)
(* the one retiring_ holds, when a failed call left its header valid or    *)
(* torn (RetireFails only), its file still shown.                          *)
Zeroing(s) ==
  \/ /\ RetireEnabled
     /\ s = rseg
  \/ /\ phase = "running"
     /\ retiring # 0
     /\ s = retiring
     /\ Shown(s)
     /\ disk[s].header \in {"valid", "damaged"}

(* read_segments_.front() after the call took segment s, if it did. *)
RsegAfterTaking(s) == IF retiring = 0 THEN rseg + 1 ELSE rseg

(* Whether retire_segment_file zeroes the header before it removes the     *)
(* file (FuseeLogWeak.tla substitutes FALSE).                              *)
ZeroFirst == TRUE

(* Zero its header and sync it: from then on recovery skips it. *)
RetireZeroHeader ==
  \E s \in Segments :
    /\ ZeroFirst
    /\ Zeroing(s)
    /\ disk' = [disk EXCEPT ![s] = HeaderOnly("zeroed")]
    /\ retiring' = s
    /\ rseg' = RsegAfterTaking(s)
    /\ UNCHANGED <<unlinked, blobs, ckpt, phase, life, dels, wseg, wslot,
                   nextSeq, lastId, published, inflight, sealing, rolling,
                   rollAcked, bcur, bnewest, acknowledged, lineage, damaged>>

(* Remove the file, which the directory then no longer shows; the removal *)
(* is durable only with the directory's sync.                              *)
RetireUnlink ==
  \E s \in Segments :
    /\ \/ /\ phase = "running"
          /\ retiring # 0
          /\ s = retiring
          /\ Shown(s)
          /\ disk[s].header = "zeroed"
       \/ /\ ~ZeroFirst
          /\ Zeroing(s)
    /\ unlinked' = Append(unlinked, s)
    /\ retiring' = s
    /\ rseg' = RsegAfterTaking(s)
    /\ UNCHANGED <<disk, blobs, ckpt, phase, life, dels, wseg, wslot, nextSeq,
                   lastId, published, inflight, sealing, rolling, rollAcked,
                   bcur, bnewest, acknowledged, lineage, damaged>>

(* Sync the directory (the file is gone from it, removed now or by an      *)
(* earlier call); retiring_ is cleared.                                    *)
RetireSyncDir ==
  /\ phase = "running"
  /\ retiring # 0
  /\ ~Shown(retiring) \/ disk[retiring].header = "none"
  /\ disk' = Visible(disk, unlinked)
  /\ unlinked' = <<>>
  /\ retiring' = 0
  /\ UNCHANGED <<blobs, ckpt, phase, life, dels, wseg, wslot, nextSeq, lastId,
                 published, inflight, sealing, rolling, rollAcked, rseg, bcur,
                 bnewest, acknowledged, lineage, damaged>>

(* A crash while the zeros are being written: the header is torn. *)
CrashRetiring ==
  \E s \in Segments :
    /\ ZeroFirst
    /\ Zeroing(s)
    /\ \E outcome \in Outcomes :
         disk' \in {[d EXCEPT ![s] = HeaderOnly("damaged")] :
                      d \in CrashDisks(AfterCrash(outcome), unlinked)}
    /\ unlinked' = <<>>
    /\ WriterLost
    /\ UNCHANGED <<blobs, ckpt, life, acknowledged, lineage, damaged>>

(* RetireFails only: a retire step fails with an I/O error and the process *)
(* goes on, as the log service does (server/store_service.cpp reports the  *)
(* error and retires again at the next checkpoint; the engine's            *)
(* checkpointer stops retiring until the next open instead). Log::retire   *)
(* keeps the segment in retiring_, so the next call finishes it before it  *)
(* takes another (RetireZeroHeader, RetireUnlink, RetireSyncDir). What     *)
(* retiring_ holds after the failure: FuseeLogWeak.tla substitutes the     *)
(* code before ed818e5, which forgot the segment.                          *)
KeepRetiring(s) == s

(* Zeroing failed (the write or its sync): on disk the header is still     *)
(* valid (or as torn as it was), torn, or zeroed.                          *)
RetireZeroFails ==
  \E s \in Segments :
    /\ RetireFails
    /\ ZeroFirst
    /\ Zeroing(s)
    /\ \E d \in {disk, [disk EXCEPT ![s] = HeaderOnly("damaged")],
                       [disk EXCEPT ![s] = HeaderOnly("zeroed")]} :
         disk' = d
    /\ retiring' = KeepRetiring(s)
    /\ rseg' = RsegAfterTaking(s)
    /\ UNCHANGED <<unlinked, blobs, ckpt, phase, life, dels, wseg, wslot,
                   nextSeq, lastId, published, inflight, sealing, rolling,
                   rollAcked, bcur, bnewest, acknowledged, lineage, damaged>>

(* Removing failed (the file is still shown), or the directory sync after  *)
(* it (the removal is not durable).                                        *)
RetireRemoveFails ==
  /\ RetireFails
  /\ phase = "running"
  /\ retiring # 0
  /\ disk[retiring].header = "zeroed"
  /\ \E u \in {unlinked,
               IF Shown(retiring) THEN Append(unlinked, retiring) ELSE unlinked} :
       unlinked' = u
  /\ retiring' = KeepRetiring(retiring)
  /\ UNCHANGED <<disk, blobs, ckpt, phase, life, dels, wseg, wslot, nextSeq,
                 lastId, published, inflight, sealing, rolling, rollAcked, rseg,
                 bcur, bnewest, acknowledged, lineage, damaged>>

(* retire_blob_files(): once the call's segments are gone, a blob file     *)
(* whose newest referencing segment is retired, that is not the current    *)
(* one (BlobWriter::in_use) and that no unpublished batch references is    *)
(* removed, and the blob directory synced.                                 *)
RetireBlob ==
  /\ Retire
  /\ phase = "running"
  /\ retiring = 0
  /\ \E f \in BlobFiles :
       /\ blobs[f]
       /\ bnewest[f] # 0
       /\ bnewest[f] < rseg
       /\ f < bcur
       /\ \A k \in 1..Len(inflight) : inflight[k].batch.blob # f
       /\ blobs' = [blobs EXCEPT ![f] = FALSE]
       /\ bnewest' = [bnewest EXCEPT ![f] = 0]
  /\ UNCHANGED <<disk, unlinked, ckpt, phase, life, dels, wseg, wslot, nextSeq,
                 lastId, published, inflight, sealing, rolling, rollAcked, rseg,
                 retiring, bcur, acknowledged, lineage, damaged>>

Next ==
  \/ Seal
  \/ BlobRoll
  \/ Prepare
  \/ SealOverflows
  \/ Roll
  \/ SealAfterRoll
  \/ CompleteWrite
  \/ Crash
  \/ Restart
  \/ CrashWritingHeader
  \/ Reopen
  \/ ApplyRemove
  \/ ApplySync
  \/ ApplySyncLast
  \/ StartWriting
  \/ RotBatch
  \/ RotHeader
  \/ LoseSegment
  \/ TruncateSegment
  \/ Checkpoint
  \/ RetireZeroHeader
  \/ RetireUnlink
  \/ RetireSyncDir
  \/ CrashRetiring
  \/ RetireZeroFails
  \/ RetireRemoveFails
  \/ RetireBlob

Spec == Init /\ [][Next]_vars

-----------------------------------------------------------------------------
(***************************************************************************)
(* Invariants.                                                             *)
(***************************************************************************)

SlotValues == {Zero, Torn} \cup
  [kind : {"batch"}, sequence : 1..MaxSeq, prev : [sequence : 0..MaxSeq, life : 0..MaxLife],
   acked : 0..MaxSeq, life : 1..MaxLife, roll : BOOLEAN, salt : 0..MaxLife,
   whole : BOOLEAN, blob : {0} \cup BlobFiles]

TypeOK ==
  /\ \A s \in Segments :
       /\ disk[s].header \in {"none", "valid", "damaged", "zeroed"}
       /\ disk[s].whole \in BOOLEAN
       /\ \A i \in SlotIdx : disk[s].slots[i] \in SlotValues
  /\ \A j \in 1..Len(unlinked) : unlinked[j] \in Present(disk)
  /\ Cardinality(Range(unlinked)) = Len(unlinked)
  /\ blobs \in [BlobFiles -> BOOLEAN]
  /\ \A j \in 1..Len(dels) : dels[j] \in Segments \cup {SyncLast}
  /\ phase \in {"running", "opening", "down"}
  /\ life \in 1..MaxLife
  /\ wseg \in Segments /\ wslot \in 0..Slots
  /\ rseg \in Segments /\ rseg <= wseg
  /\ retiring \in {0} \cup Segments
  /\ published \in 0..MaxSeq
  /\ Len(inflight) <= WritesInFlightMax + 1
  \* at most two writes in flight at the device
  /\ Cardinality(Pending) <= WritesInFlightMax
  /\ ckpt \in 1..(MaxSeq + 1)
  /\ bcur \in 1..(Blobs + 1)
  /\ bnewest \in [BlobFiles -> 0..MaxSegment]
  /\ sealing \in BOOLEAN
  /\ ~(sealing /\ rolling)

(* Each invariant about recovery holds for every disk a crash now could    *)
(* leave (the removals not yet durable kept or undone) and for the files   *)
(* the directory shows (what the next open after a Restart reads).        *)
Views == CrashDisks(disk, unlinked)

(* (1) Every acknowledged batch is in the recovered log, or recovery       *)
(* refuses. A batch before first_sequence_max is covered by a checkpoint:  *)
(* retirement may have removed it.                                         *)
AckedInRecoveredLog ==
  \A v \in Views :
    LET r == Recover(v, blobs)
    IN r.refused \/ \A a \in acknowledged : a \in ChainIds(r) \/ a.sequence < ckpt

(* (2) Recovery never accepts a batch outside the current chain: each      *)
(* batch it keeps was sealed by this life or kept by the recovery this     *)
(* life started from, and the sequences run without a hole from the        *)
(* oldest segment's first_sequence.                                        *)
OnlyTheChain ==
  \A v \in Views :
    LET r == Recover(v, blobs)
    IN ~r.refused =>
         \A k \in 1..Len(r.chain) :
           /\ IdOf(r.chain[k]) \in lineage
           /\ r.chain[k].sequence = r.first + k - 1

(* (3) A crash that damaged nothing never refuses. *)
NoRefusalWithoutDamage ==
  damaged = 0 => \A v \in Views : ~Recover(v, blobs).refused

(* (4) Recovering again gives the same log: planning after the plan was    *)
(* applied, or after a crash part-way through applying it (the first k     *)
(* deletions done), keeps the same chain and ends it at the same place.    *)
Kept(r) == [refused |-> r.refused, oldest |-> r.oldest, first |-> r.first,
            chain |-> r.chain, endSeg |-> r.endSeg, endSlot |-> r.endSlot,
            lastSeq |-> r.lastSeq, lastId |-> r.lastId]

RecoveryIdempotent ==
  \A v \in Views :
    LET r == Recover(v, blobs)
        dels_ == Deletions(v, r)
    IN ~r.refused =>
         \A k \in 1..Len(dels_) : Kept(Recover(ApplyFirst(v, dels_, k), blobs)) = Kept(r)

(* (5) Every batch of the recovered chain is whole and passes its CRC with *)
(* the salt of the segment it lies in: no torn write is ever kept.         *)
ChainChecksummed ==
  \A v \in Views :
    LET r == Recover(v, blobs)
    IN ~r.refused =>
         \A k \in 1..Len(r.chain) :
           /\ r.chain[k].whole
           /\ r.chain[k].salt = v[r.homes[k]].salt

(* (6) The checkpoints cover only what was acknowledged: every sequence    *)
(* below first_sequence_max was reported durable. Checkpoints follow the   *)
(* published positions, which must therefore move only in order.           *)
CheckpointAcked ==
  \A q \in 1..(ckpt - 1) : \E a \in acknowledged : a.sequence = q

=============================================================================
