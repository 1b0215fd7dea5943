"""``optimizer.state`` while a step's host part is unsettled: the first read settles it.

On an accelerator, what the device could not select after a withheld step (state the step
created, Python numbers, replaced tensors, CPU step counts beside device parameters:
withholding.py) needs the verdict on the host, a read that waits for the device. Reading it
at ``observe`` costs nothing more (``observe`` reads the step's numbers anyway); reading it
at the first look at the optimizer's state, and only then, keeps a loop that saves
``optimizer.state_dict()`` between ``step()`` and ``observe`` right, without a wait on every
healthy step.

``optimizer.state`` is a plain ``defaultdict`` that torch reads directly, so for that time it
is replaced by this subclass, holding the same entries (the per-parameter dicts themselves,
not copies). Any call on it settles first, which puts the optimizer's own dict back; the
call, and any later one on the view by whoever kept it, then goes to that dict. Pickled or
deep-copied it is a plain ``defaultdict``. Only C code that iterates the view itself, not
through its methods (``dict(view)``), reads it unsettled, which is why ``state_dict`` and
``load_state_dict`` also settle in their pre-hooks (protection.py).
"""
from __future__ import annotations

import weakref
from collections import defaultdict
from collections.abc import Callable
from typing import Any, SupportsIndex

import torch


class SettlingState(defaultdict):
    """``optimizer.state``'s entries; the first call on it runs ``settle``, once. Built as
    a ``defaultdict`` is, it is one: only ``install`` makes it a view."""

    _settle: Callable[[], None] | None = None
    _own: defaultdict | None = None                   # the optimizer's own dict
    _optimizer: weakref.ref | None = None

    @classmethod
    def install(cls, optimizer: torch.optim.Optimizer,
                settle: Callable[[], None]) -> SettlingState:
        """``optimizer.state`` replaced by a view whose first call runs ``settle`` (which
        must ``release`` it)."""
        own = optimizer.state
        view = cls(dict, own)
        view._own, view._optimizer, view._settle = own, weakref.ref(optimizer), settle
        optimizer.state = view
        return view

    def release(self) -> None:
        """The optimizer's own dict back in place (unless the state was replaced since, by
        ``load_state_dict``); ``settle`` will not run."""
        self._settle = None
        optimizer = self._optimizer() if self._optimizer is not None else None
        if optimizer is not None and optimizer.__dict__.get("state") is self:
            optimizer.state = self._own

    def mirror(self) -> None:
        """The view's own entries those of the optimizer's dict again (after settling), for
        C code reading it directly."""
        if self._own is not None:
            dict.clear(self)
            dict.update(self, self._own)

    def __reduce_ex__(self, protocol: SupportsIndex) -> Any:
        target = _target(self)
        return defaultdict(dict, dict.items(target)).__reduce_ex__(protocol)


def _target(view: SettlingState) -> dict:
    """The dict a call on ``view`` goes to, settled first."""
    settle = view._settle
    if settle is not None:
        view._settle = None
        settle()                  # reads the verdict, settles, releases the view
    return view if view._own is None else view._own


def _settling(name: str) -> Callable[..., Any]:
    method = getattr(defaultdict, name)

    def call(self: SettlingState, *args: Any, **kwargs: Any) -> Any:
        return method(_target(self), *args, **kwargs)
    call.__name__ = name
    return call


# every way Python code reads or writes a dict: torch's own ``self.state[p]``, ``.items()``
# in ``state_dict``, a user's ``optimizer.state[p]["exp_avg"]``
for _name in ("__getitem__", "__setitem__", "__delitem__", "__contains__", "__iter__",
              "__len__", "__eq__", "__ne__", "__repr__", "__or__", "__ior__", "__copy__",
              "get", "keys", "values", "items", "pop", "popitem", "setdefault", "update",
              "clear", "copy"):
    setattr(SettlingState, _name, _settling(_name))
