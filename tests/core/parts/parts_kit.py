"""The monitor's parts built alone, without a Monitor: a real writer into a list, a real
responder writing into ``tmp_path``, one current segment, already started."""
from dataclasses import dataclass, field

from mindwatch import FrameworkHooks, MonitorSettings
from mindwatch.decisions.actions import Actions
from mindwatch.decisions.responder import Responder
from mindwatch.pipeline.segment import CurrentSegment
from mindwatch.pipeline.writer import RecordWriter
from mindwatch.policy import Policy
from mindwatch.sinks.base import Sink


class ListSink(Sink):
    def __init__(self):
        self.records = []

    def write(self, record):
        self.records.append(dict(record))

    def of_kind(self, kind):
        return [r for r in self.records if r["kind"] == kind]


@dataclass
class Kit:
    tmp_path: object
    clock: object
    on_anomaly: object = None
    save_checkpoint: object = None
    on_sink_error: str = "warn"
    sinks: list = field(default_factory=list)

    def __post_init__(self):
        settings = MonitorSettings.from_kwargs(
            **({"on_anomaly": self.on_anomaly} if self.on_anomaly is not None else {}))
        self.policy = Policy(settings.policies, signal=settings.on_signal)
        self.sink = ListSink()
        self.current = CurrentSegment(self.clock.perf_counter())
        self.current.segment.started = True
        self.writer = RecordWriter(rank=0, clock=self.clock, console=self.sink,
                                   open_sinks=lambda: [self.sink, *self.sinks],
                                   on_error=self.on_sink_error)
        self.responder = Responder(
            log_dir=str(self.tmp_path), rank=0, policy=self.policy,
            framework=FrameworkHooks(save_checkpoint=self.save_checkpoint))
        self.actions = Actions(current=self.current, responder=self.responder,
                               writer=self.writer)

    @property
    def segment(self):
        return self.current.segment

    def parts(self):
        """The collaborators every part takes."""
        return {"current": self.current, "responder": self.responder, "writer": self.writer,
                "actions": self.actions}
