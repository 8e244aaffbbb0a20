"""The client side of the run config's client-side ``dp``: Flower's clipping mod on training replies.

Here, not beside the server's wrappers (``strategies.privacy``), so a ClientApp applies it without
importing any strategy or Flower's ServerApp.
"""

from __future__ import annotations

from flwr.app import Context, Message, MessageType
from flwr.clientapp.mod import adaptiveclipping_mod, fixedclipping_mod

from fedapp.core.compat import zero_norm_clipping

#: ``dp`` -> Flower's clipping mod, applied by fedapp's ClientApp (:func:`dp_mod`)
CLIENT_MODS = {"client-fixed": fixedclipping_mod, "client-adaptive": adaptiveclipping_mod}

#: reply metric :func:`dp_mod` adds once Flower's clipping mod has clipped the reply
CLIPPED = "dp-clipped"


def dp_mod(msg: Message, context: Context, call_next) -> Message:
    """Flower mod of fedapp's ClientApp: Flower's clipping mod of the run's client-side ``dp`` on
    training messages (it clips the reply's update to the norm the wrapper sent), the reply marked
    ``dp-clipped``; otherwise, and for every run without client-side dp, it passes the message
    through untouched. A ClientApp of one's own (``fedapp.runtime.library``) lists it in its mods."""
    if msg.metadata.message_type.split(".")[0] != MessageType.TRAIN:
        return call_next(msg, context)
    mod = CLIENT_MODS.get(str(context.run_config.get("dp", "none")))  # the ServerApp validated it
    if mod is None:
        return call_next(msg, context)
    zero_norm_clipping()
    reply = mod(msg, context, call_next)
    if reply.has_content():  # clipped: the server takes only replies that say so
        reply.content["metrics"][CLIPPED] = 1
    return reply
