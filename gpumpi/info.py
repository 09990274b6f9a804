"""Info objects: ordered string key/value hints (MPI_Info), pure (L1)."""

from __future__ import annotations

from .constants import MAX_INFO_KEY, MAX_INFO_VAL
from .errors import ERR_ARG, ERR_INFO, ERR_INFO_KEY, ERR_INFO_NOKEY, ERR_INFO_VALUE, error
from ._handles import Handle, Table, is_constant

_NULL_H = 0x1C000000


class Info(Handle):
    """Info object (MPI_Info).

    ``Info(info)`` is a second reference to the same object (changes through one are
    seen through the other), as in mpi4py; ``Dup`` makes a new object."""

    __slots__ = ("_d", "_null", "_h", "__weakref__")
    _hnull = _NULL_H
    _htable = Table("Info", -0x64000000)

    def __init__(self, info: "Info | None" = None) -> None:
        if info is None:
            self._d, self._null, self._h = {}, True, _NULL_H
        elif not isinstance(info, Info):
            raise TypeError(f"Info: expecting an Info (got {type(info).__name__})")
        else:
            self._d, self._null, self._h = info._d, info._null, info._h

    @classmethod
    def Create(cls, items=None) -> "Info":
        """Create a new, empty info object (MPI_Info_create); optional initial items."""
        i = cls.__new__(cls)
        i._d, i._null, i._h = {}, False, cls._htable.new()
        cls._htable.add(i)
        if items is not None:
            for k, v in dict(items).items():
                i.Set(k, v)
        return i

    @classmethod
    def Create_env(cls, args=None) -> "Info":
        """Create an info object with the environment of this process (MPI_Info_create_env).

        The keys are those of ``INFO_ENV`` (``command``, ``argv``, ``maxprocs``,
        ``host``, ``arch``, ``wdir``, ``thread_level``); ``args`` (the command and its
        arguments) replace ``command`` and ``argv``."""
        i = cls.Create()
        i._d.update(_env_items(args))
        return i

    def _check(self, call: str) -> None:
        if self._null:
            raise error(ERR_INFO, f"{call}: null info object (INFO_NULL)")

    def _hval(self) -> int:
        return self._h

    def _hnullify(self) -> None:
        self._d, self._null, self._h = {}, True, _NULL_H

    def _hreduce(self):
        return (type(self).Create, (self.items(),))

    def __bool__(self) -> bool:
        return not self._null

    def Dup(self) -> "Info":
        """Duplicate (MPI_Info_dup)."""
        self._check("Info.Dup")
        return type(self).Create(self._d)

    def Free(self) -> None:
        """Free the info object (MPI_Info_free); the constant INFO_ENV stays."""
        self._check("Info.Free")
        if is_constant(self):
            return
        self._hnullify()

    def Set(self, key: str, value: str) -> None:
        """Set a key (MPI_Info_set)."""
        self._check("Info.Set")
        key, value = str(key), str(value)
        if not key or len(key) > MAX_INFO_KEY:
            raise error(ERR_INFO_KEY, f"Info.Set: invalid key length ({len(key)}, max {MAX_INFO_KEY})")
        if len(value) > MAX_INFO_VAL:
            raise error(ERR_INFO_VALUE, f"Info.Set: value too long ({len(value)}, max {MAX_INFO_VAL})")
        self._d[key] = value

    def Get(self, key: str):
        """Value for ``key`` or None (MPI_Info_get_string)."""
        self._check("Info.Get")
        return self._d.get(str(key))

    def Delete(self, key: str) -> None:
        """Delete a key (MPI_Info_delete)."""
        self._check("Info.Delete")
        try:
            del self._d[str(key)]
        except KeyError:
            raise error(ERR_INFO_NOKEY, f"Info.Delete: key not defined ({key!r})") from None

    def Get_nkeys(self) -> int:
        """Number of keys (MPI_Info_get_nkeys)."""
        self._check("Info.Get_nkeys")
        return len(self._d)

    def Get_nthkey(self, n: int) -> str:
        """The n-th key (MPI_Info_get_nthkey)."""
        self._check("Info.Get_nthkey")
        keys = list(self._d)
        if not 0 <= int(n) < len(keys):
            raise error(ERR_ARG, f"Info.Get_nthkey: index out of range ({n}, {len(keys)} keys)")
        return keys[int(n)]

    # Python mapping protocol, as mpi4py
    def __len__(self) -> int:
        return 0 if self._null else len(self._d)

    def __contains__(self, key) -> bool:
        return not self._null and key in self._d

    def __iter__(self):
        return iter(() if self._null else list(self._d))

    def __getitem__(self, key: str) -> str:
        if self._null:
            raise KeyError(key)
        return self._d[key]

    def __setitem__(self, key: str, value: str) -> None:
        if self._null:
            raise KeyError(key)
        self.Set(key, value)

    def __delitem__(self, key: str) -> None:
        if self._null or key not in self._d:
            raise KeyError(key)
        del self._d[key]

    def get(self, key: str, default=None):
        """Return the value for ``key``, or ``default`` when it is not set (MPI_Info_get_string)."""
        return default if self._null else self._d.get(key, default)

    def keys(self):
        """Return the keys, in order (MPI_Info_get_nthkey)."""
        return list(self)

    def values(self):
        """Return the values, in key order (MPI_Info_get_string)."""
        return [self._d[k] for k in self]

    def items(self):
        """Return the ``(key, value)`` pairs, in key order (MPI_Info_get_nthkey, MPI_Info_get_string)."""
        return [(k, self._d[k]) for k in self]

    def copy(self) -> "Info":
        """A new info object with the same items (INFO_NULL for INFO_NULL)."""
        return Info() if self._null else self.Dup()

    def clear(self) -> None:
        """Remove every item (nothing for INFO_NULL)."""
        if not self._null:
            self._d.clear()

    def update(self, other=(), **kwds) -> None:
        """Set the items of ``other`` and ``kwds``."""
        if self._null:
            raise KeyError("Info.update: null info object (INFO_NULL)")
        for k, v in dict(other, **kwds).items():
            self.Set(k, v)

    def pop(self, key, *default):
        """Remove ``key`` and return its value (or ``default``)."""
        if self._null:
            if default:
                return default[0]
            raise KeyError(key)
        return self._d.pop(key, *default)

    def popitem(self):
        """Remove and return the last item."""
        if self._null or not self._d:
            raise KeyError("Info.popitem: no items")
        return self._d.popitem()


#: what MPI_INFO_ENV holds: filled by the MPI facade (which may read the environment)
_ENV: dict = {}


def set_environment(items: dict) -> None:
    """The facade records the process environment (``command``, ``argv``, ``maxprocs``...)
    that ``INFO_ENV`` and ``Info.Create_env`` report."""
    _ENV.clear()
    _ENV.update({str(k): str(v) for k, v in items.items() if v})
    INFO_ENV._d.clear()
    INFO_ENV._d.update(_ENV)


def _env_items(args=None) -> dict:
    items = dict(_ENV)
    if args is not None:
        argv = [str(a) for a in args]
        items.pop("argv", None)
        if argv:
            items["command"] = argv[0]
            if argv[1:]:
                items["argv"] = " ".join(argv[1:])
    return items


Info._hbase = Info
#: Null info object (MPI_INFO_NULL).
INFO_NULL = Info._htable.constant(Info(), "INFO_NULL")
#: Environment of the process (MPI_INFO_ENV).
INFO_ENV = Info._htable.constant(Info.Create(), "INFO_ENV", 0x5C000001)
INFO_ENV._h = 0x5C000001
