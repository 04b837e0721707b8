// Package shardgroup is a coordinator cluster's part in its region's
// shard groups (docs/coordinator.md#shard-groups). A region's
// coordinators may run as several groups, each an ordinary cluster
// owning some slots. The home group, the one started without ShardHome,
// holds the shard map and the rules, divides the global rules, and its
// leader carries out moves; every other group mirrors the home's rules
// and owns only what moves gave it.
//
// Here are the ShardService's handlers, the steps of moves a group
// commits in its log, the home leader's mover that carries each move a
// step at a time (the step function itself is package slotmove's, which
// the simulator runs too), a non-home leader's loop that follows the
// home group, and the count of each slot's load. The package reaches the
// member it runs on only through Member: its replica, its proposals,
// whether and where it leads, and its connections to other members.
package shardgroup
