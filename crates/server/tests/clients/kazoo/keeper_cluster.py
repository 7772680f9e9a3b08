"""A pytest plugin (`-p keeper_cluster`) that runs kazoo's own test suite against one running
Keeper instead of the ZooKeeper ensemble kazoo's harness would start.

kazoo's tests reach their servers only through `kazoo.testing.harness.get_global_cluster()`;
this replaces it with a "cluster" of the Keeper named by the environment:

    KEEPER_ADDRESS           host:port of the plain listener
    KEEPER_SECURE_ADDRESS    host:port of the secure listener (TestSSLClient)
    KEEPER_TLS_CA, KEEPER_TLS_CLIENT_CERT, KEEPER_TLS_CLIENT_KEY
                             PEM files kazoo's TLS client presents and trusts

The server is the test's to configure (kazoo's SASL tests expect the users of its harness's
JAAS file: jaasuser/jaas_password and super/super_secret), and its to start and stop: starting,
stopping and terminating this cluster do nothing.
"""

import os

import kazoo.testing.harness as harness


class _Server:
    def __init__(self, address, secure_address):
        self.address = address
        self.secure_address = secure_address
        self.running = True


class KeeperCluster(list):
    def start(self):
        pass

    def stop(self):
        pass

    def terminate(self):
        pass

    def get_logs(self):
        return []

    def get_ssl_client_configuration(self):
        def read(var):
            with open(os.environ[var], "rb") as f:
                return f.read()

        return {
            "client_key": read("KEEPER_TLS_CLIENT_KEY"),
            "client_cert": read("KEEPER_TLS_CLIENT_CERT"),
            "ca_cert": read("KEEPER_TLS_CA"),
        }


_CLUSTER = KeeperCluster(
    [_Server(os.environ["KEEPER_ADDRESS"], os.environ.get("KEEPER_SECURE_ADDRESS", ""))]
)
harness.get_global_cluster = lambda: _CLUSTER
