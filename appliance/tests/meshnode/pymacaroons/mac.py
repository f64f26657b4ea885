"""An independent macaroon implementation (PyPI pymacaroons) for the L402 test.

  mac.py inspect MACAROON            JSON: location, identifier (hex), caveats, signature
  mac.py attenuate MACAROON CAVEAT…  the macaroon with first-party caveats added, as
                                     pymacaroons serializes it (V2 binary, URL-safe base64)
"""
import json
import sys

from pymacaroons import Macaroon
from pymacaroons.serializers import BinarySerializer


def text(v):
    return v.decode() if isinstance(v, bytes) else v


def main(argv):
    cmd, mac = argv[1], Macaroon.deserialize(argv[2])
    if cmd == "inspect":
        print(json.dumps({
            "location": text(mac.location),
            "identifier": mac.identifier_bytes.hex(),
            "caveats": [text(c.caveat_id) for c in mac.first_party_caveats()],
            "signature": text(mac.signature),
            "version": mac.version,
        }))
    elif cmd == "attenuate":
        for c in argv[3:]:
            mac.add_first_party_caveat(c)
        print(mac.serialize(serializer=BinarySerializer()))
    else:
        sys.exit(f"unknown command {cmd}")


if __name__ == "__main__":
    main(sys.argv)
