/*===- CApiSmoke.c - The C ABI compiled as C ----------------------------===*\
|* Part of ShardX. Compiled by a C compiler to check that CApi.h is C.        *|
\*===----------------------------------------------------------------------===*/

#include "shardx/Runtime/CApi.h"

/* All-reduces (rank + 1) * (i + 1) over all axes of a 2-D mesh and checks
 * the sums; returns 0 when they are right. */
int shardx_test_c_all_reduce(shardx_rt_comm *comm) {
  float data[5];
  int64_t axes[2] = {0, 1};
  int64_t size = shardx_rt_size(comm);
  float ranks = (float)(size * (size + 1) / 2);
  for (int i = 0; i < 5; ++i)
    data[i] = (float)((shardx_rt_rank(comm) + 1) * (i + 1));
  if (shardx_rt_all_reduce(comm, data, data, 5, SHARDX_RT_F32, SHARDX_RT_SUM,
                           axes, 2) != 0)
    return 1;
  for (int i = 0; i < 5; ++i)
    if (data[i] != ranks * (float)(i + 1))
      return 2;
  return 0;
}
