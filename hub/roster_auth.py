"""Log in with a password of one's own, checked against salted PBKDF2 hashes.

The hub's single-account mode has no system accounts for PAM to check. JupyterHub's
shared-password authenticator would let any student log in as any other with the
one password, so each roster member gets a password of their own instead.
"""

import hashlib
import hmac
import json
import os
import secrets

from jupyterhub.auth import Authenticator
from traitlets import Unicode

ROUNDS = 200_000


def hash_password(password: str, salt: bytes = None) -> str:
    salt = salt or secrets.token_bytes(16)
    digest = hashlib.pbkdf2_hmac("sha256", password.encode(), salt, ROUNDS)
    return f"{salt.hex()}${digest.hex()}"


def check_password(password: str, stored: str) -> bool:
    salt, digest = stored.split("$")
    return hmac.compare_digest(hash_password(password, bytes.fromhex(salt)).split("$")[1], digest)


class RosterAuthenticator(Authenticator):
    """Users and password hashes from a JSON file ({username: "salt$hash"})."""

    password_file = Unicode(config=True, help="JSON file of password hashes, by username.")

    async def authenticate(self, handler, data):
        name = self.normalize_username(data.get("username", ""))
        try:
            with open(self.password_file) as fh:
                stored = json.load(fh).get(name)
        except OSError:
            self.log.error("cannot read the password file %s", self.password_file)
            return None
        if stored and check_password(data.get("password", ""), stored):
            return {"name": name}
        return None


def write_passwords(path, usernames) -> dict:
    """New random passwords for the users who have none yet; returns {user: password} of those."""
    hashes = json.load(open(path)) if os.path.exists(path) else {}
    new = {name: secrets.token_urlsafe(9) for name in usernames if name not in hashes}
    hashes.update({name: hash_password(pw) for name, pw in new.items()})
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        json.dump(hashes, fh, indent=1)
    return new
