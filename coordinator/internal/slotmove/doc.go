// Package slotmove is how a slot move is carried out, step by step
// (docs/coordinator.md#moving-a-slot-exactly-once-under-load): the step
// function that takes a move from one phase to the next, and what a
// group checks of a step before committing it.
//
// It is a package of its own because two callers carry moves by it: the
// home leader's mover, whose steps travel over gRPC to other groups'
// leaders and commit through Raft, and the simulator's engines (package
// coordinator/allocator), whose steps are calls on each group's state in
// one process. A move tested in the simulator is then a move as the
// coordinator makes it. Nothing here knows Raft or the network: each
// caller says how a step reaches its group and how a phase is recorded.
package slotmove
