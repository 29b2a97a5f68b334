/*
 * test_pool_header_alone.c - dilattn_pool.h compiles when it is the first and only header included,
 * and a host pool made through it hands out a 256-byte aligned block.
 */
#include "dilattn_pool.h"

#include <stdint.h>
#include <stdio.h>

int main(void) {
  dilattn_pool_options options;
  dilattn_pool pool = NULL;
  void* block = NULL;
  dilattn_pool_options_init(&options, 1 << 16);
  if (dilattn_pool_create_host(&pool, &options) != DILATTN_SUCCESS ||
      dilattn_pool_alloc(pool, 1000, &block) != DILATTN_SUCCESS) {
    fprintf(stderr, "FAILED: %s\n", dilattn_last_error());
    return 1;
  }
  if ((uintptr_t)block % DILATTN_POOL_MIN_BLOCK != 0) {
    fprintf(stderr, "FAILED: block %p is not %d-byte aligned\n", block, DILATTN_POOL_MIN_BLOCK);
    return 1;
  }
  dilattn_pool_free(pool, block);
  dilattn_pool_destroy(pool);
  printf("dilattn_pool.h compiles alone\n");
  return 0;
}
