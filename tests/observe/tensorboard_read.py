"""Reads Stoker's TensorBoard event files with TensorBoard's own code (tests/observe/tensorboard_test.cpp).

  tensorboard_read.py scalars DIR OUT   every scalar EventAccumulator finds in DIR, one
                                        "tag step value" line each, into OUT
  tensorboard_read.py records FILE      reads every record of FILE with TensorBoard's record reader
                                        (its CRC checks); prints "records N", or the DataLossError
                                        and exits with 3

Needs the `tensorboard` package (bench/setup.sh installs it into the libtorch venv).
"""
import sys


def scalars(folder, out_path):
    from tensorboard.backend.event_processing import event_accumulator as ea

    acc = ea.EventAccumulator(folder, size_guidance={ea.SCALARS: 0})
    acc.Reload()
    with open(out_path, "w") as out:
        for tag in acc.Tags()["scalars"]:
            for event in acc.Scalars(tag):
                out.write(f"{tag} {event.step} {event.value!r}\n")


def records(path):
    from tensorboard.compat.proto import event_pb2
    from tensorboard.compat.tensorflow_stub import errors, pywrap_tensorflow

    reader = pywrap_tensorflow.PyRecordReader_New(path, 0, None, None)
    count = 0
    while True:
        try:
            reader.GetNext()
        except errors.OutOfRangeError:
            break
        except errors.DataLossError as e:
            print(f"DataLossError after {count} records: {e.message}")
            sys.exit(3)
        event_pb2.Event.FromString(reader.record())
        count += 1
    print(f"records {count}")


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "scalars":
        scalars(sys.argv[2], sys.argv[3])
    elif len(sys.argv) == 3 and sys.argv[1] == "records":
        records(sys.argv[2])
    else:
        sys.exit(__doc__)
