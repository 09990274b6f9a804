"""Info objects: ordered string key/value hints (MPI_Info), pure (L1)."""

from __future__ import annotations

from .constants import MAX_INFO_KEY, MAX_INFO_VAL
from .errors import ERR_ARG, ERR_INFO, ERR_INFO_KEY, ERR_INFO_NOKEY, ERR_INFO_VALUE, error


class Info:
    """Info object (MPI_Info)."""

    __slots__ = ("_d", "_null", "__weakref__")

    def __init__(self, info: "Info | None" = None) -> None:
        if info is None:
            self._d, self._null = {}, True
        else:
            self._d, self._null = dict(info._d), info._null

    @classmethod
    def Create(cls, items=None) -> "Info":
        """Create a new, empty info object (MPI_Info_create); optional initial items."""
        i = cls.__new__(cls)
        i._d, i._null = {}, False
        if items is not None:
            for k, v in dict(items).items():
                i.Set(k, v)
        return i

    def _check(self, call: str) -> None:
        if self._null:
            raise error(ERR_INFO, f"{call}: null info object (INFO_NULL)")

    def __eq__(self, other) -> bool:
        if not isinstance(other, Info):
            return NotImplemented
        return self is other or (self._null and other._null)

    def __hash__(self) -> int:
        return id(self)

    def __bool__(self) -> bool:
        return not self._null

    def Dup(self) -> "Info":
        """Duplicate (MPI_Info_dup)."""
        self._check("Info.Dup")
        return Info.Create(self._d)

    def Free(self) -> None:
        """Free the info object (MPI_Info_free)."""
        self._check("Info.Free")
        self._d, self._null = {}, True

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
        self.Set(key, value)

    def __delitem__(self, key: str) -> None:
        if self._null or key not in self._d:
            raise KeyError(key)
        del self._d[key]

    def get(self, key: str, default=None):
        return default if self._null else self._d.get(key, default)

    def keys(self):
        return list(self)

    def values(self):
        return [self._d[k] for k in self]

    def items(self):
        return [(k, self._d[k]) for k in self]

    def copy(self) -> "Info":
        return self.Dup()

    def clear(self) -> None:
        self._check("Info.clear")
        self._d.clear()

    def update(self, other=(), **kwds) -> None:
        for k, v in dict(other, **kwds).items():
            self.Set(k, v)

    def pop(self, key, *default):
        self._check("Info.pop")
        return self._d.pop(key, *default)

    def popitem(self):
        self._check("Info.popitem")
        return self._d.popitem()


INFO_NULL = Info()
INFO_ENV = Info.Create({"command": "", "maxprocs": "1"})
