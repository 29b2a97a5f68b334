/*
 * dilattn_pool.h - the buddy-allocator memory pool for host and device workspaces.
 * Included by dilattn.h; not meant to be included alone.
 */
#ifndef DILATTN_POOL_H
#define DILATTN_POOL_H

#ifdef __cplusplus
extern "C" {
#endif

/* (The pool API is specified in issue 6 and lands with it.) */

#ifdef __cplusplus
}
#endif
#endif /* DILATTN_POOL_H */
