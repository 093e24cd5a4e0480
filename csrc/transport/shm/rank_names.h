#pragma once
#include <vector>

namespace ringzip::shm {

// How the engine's messages name the ranks: a node's transport inside a larger group speaks of
// them as the group does (its rank numbers and size), so an error does not mix two numberings.
struct RankNames {
  std::vector<int> ranks;  // per engine rank: its number in messages (empty: the engine's own)
  int group_size = 0;      // the size messages give (0: the engine's own)
};

}  // namespace ringzip::shm
