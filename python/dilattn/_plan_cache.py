"""_plan_cache.py - plans kept by their parameters, so that calls with the same options, sizes,
dtype and backend share one plan (making a plan validates everything and may take a while).

Used by dilattn's torch custom operators (_torch_ops.py), whose forward and backward are two
calls that see only their arguments. Any thread may call get(); the lock covers the lookup and
the making, so one key makes one plan. The most recently used `capacity` plans are kept; a
plan dropped from the cache is destroyed once no one holds it (Plan.__del__), so a call that
took it before runs to its end."""
import collections
import threading


class PlanCache:
    def __init__(self, capacity=64):
        self.capacity = capacity
        self._lock = threading.Lock()
        self._plans = collections.OrderedDict()

    def get(self, key, make):
        """The plan of key (a hashable), made by make() the first time; make's error is
        raised and nothing is kept."""
        with self._lock:
            plan = self._plans.get(key)
            if plan is None:
                plan = make()
                self._plans[key] = plan
                while len(self._plans) > self.capacity:
                    self._plans.popitem(last=False)
            else:
                self._plans.move_to_end(key)
            return plan

    def __len__(self):
        with self._lock:
            return len(self._plans)

    def clear(self):
        with self._lock:
            self._plans.clear()
