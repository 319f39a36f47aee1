// Undo log for multi-word changes that must be all-or-nothing.
//
// The log area of the pool is split into lanes; a transaction holds one lane. Save()
// copies the old bytes of a range into the lane and persists them before the caller
// changes the range; Commit() (after the caller persisted its changes) retires the
// lane's entries with one 8-byte store that also moves the lane to its next transaction
// sequence number. Every entry is bound to its transaction (sequence number, index,
// checksum), so Recover() rolls back exactly the one open transaction of each lane,
// newest entry first, and calls anything else Corruption; it is idempotent, so a crash
// during recovery is harmless. Layout and invariants: undo_log.cc.
//
// Used by `linear-log` for every multi-word change and by engines for the rare change
// that cannot be made with one failure-atomic store (an inline slot becoming an
// out-of-line one).
//
// Threads: Begin() is safe from many threads; a Tx belongs to one thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "pm/persist.h"
#include "pm/pool.h"
#include "pm/regions.h"
#include "pmhash/status.h"

namespace pmhash::pm {

class UndoLog {
 public:
  class Tx;

  // Clears every lane of a new pool.
  static Status Format(Pool& pool, Persister& persister, std::unique_ptr<UndoLog>* out);
  // Attaches to an existing pool and rolls back interrupted transactions. Corruption,
  // naming the lane, entry and pool offset, if a lane's state or one of the entries it
  // counts is damaged or belongs to another transaction; the pool is then left untouched.
  static Status Recover(Pool& pool, Persister& persister, std::unique_ptr<UndoLog>* out);

  virtual ~UndoLog() = default;

  // Takes a free lane (waits while all are busy).
  virtual std::unique_ptr<Tx> Begin() = 0;
  // Bytes of old data one transaction can save.
  virtual size_t LaneCapacity() const = 0;
  // Marks what every open checks (Region::kUndoLog): the log header and each lane's state
  // word. Entries are read only while their lane counts them, so an idle log's entry
  // bytes are left undescribed (free).
  virtual void DescribeLayout(const RegionVisitor& mark) const = 0;

  class Tx {
   public:
    // Without Commit (an error path): rolls the saved ranges back, then frees the lane.
    virtual ~Tx() = default;
    // Logs the current bytes of [addr, addr+len) durably. ResourceExhausted if the lane
    // is full (nothing logged then).
    virtual Status Save(const void* addr, size_t len) = 0;
    // Retires the entries: call after the changes are persisted.
    virtual void Commit() = 0;
  };
};

}  // namespace pmhash::pm
