// buddy_pool.cpp - the buddy-allocator memory pool (dilattn_pool.h). Not landed yet.
