/*
 * test_ring_header_alone.c - dilattn_ring.h compiles as C99 when it is the first and only header
 * included, and a one-rank ring runs through it: with P = 1 the ring is the plan's forward, so
 * one query row with one key gets O = v and LSE = scale * <q, k> = 0.5 * 2 = 1.
 */
#include "dilattn_ring.h"

#include <stdio.h>

int main(void) {
  float q[2] = {1.0f, 1.0f}, k[2] = {1.0f, 1.0f}, v[2] = {3.0f, -2.0f}, o[2] = {0, 0}, lse = 0;
  dilattn_desc desc = NULL;
  dilattn_plan plan = NULL;
  dilattn_comm comm = NULL;
  dilattn_shape shape = dilattn_shape_make(1, 1, 1, 1, 1, 2);
  dilattn_tensor tq = dilattn_tensor_contiguous(q, DILATTN_F32, 1, 1, 1, 2);
  dilattn_tensor tk = dilattn_tensor_contiguous(k, DILATTN_F32, 1, 1, 1, 2);
  dilattn_tensor tv = dilattn_tensor_contiguous(v, DILATTN_F32, 1, 1, 1, 2);
  dilattn_tensor to = dilattn_tensor_contiguous(o, DILATTN_F32, 1, 1, 1, 2);
  dilattn_tensor tl = dilattn_tensor_contiguous(&lse, DILATTN_F32, 1, 1, 1, 1);
  if (dilattn_desc_create(&desc) != DILATTN_SUCCESS || dilattn_desc_set_scale(desc, 0.5) != DILATTN_SUCCESS ||
      dilattn_plan_create(&plan, desc, &shape, DILATTN_F32, DILATTN_BACKEND_REF) != DILATTN_SUCCESS ||
      dilattn_comm_create_threads(1, 1000, &comm) != DILATTN_SUCCESS ||
      dilattn_ring_forward(plan, comm, DILATTN_RING_CONTIGUOUS, &tq, &tk, &tv, &to, &tl) != DILATTN_SUCCESS) {
    fprintf(stderr, "FAILED: %s\n", dilattn_last_error());
    return 1;
  }
  if (o[0] != 3.0f || o[1] != -2.0f || lse != 1.0f) {
    fprintf(stderr, "FAILED: O = (%g, %g), LSE = %g; want (3, -2), 1\n", o[0], o[1], lse);
    return 1;
  }
  dilattn_comm_destroy(comm);
  dilattn_plan_destroy(plan);
  dilattn_desc_destroy(desc);
  printf("dilattn_ring.h compiles alone\n");
  return 0;
}
