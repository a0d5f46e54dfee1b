"""convlab.torch.Conv2d / ConvTranspose2d and convert / revert: outputs, parameters, state_dict,
repr, pickle, deepcopy, padding modes, output_size."""
import copy
import pickle

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

import convlab.torch as ct  # noqa: E402


def _model():
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(2, 4, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(4), nn.ReLU(),
        nn.Sequential(nn.Conv2d(4, 4, 3, padding=1, groups=2)),
        nn.ConvTranspose2d(4, 2, 3, stride=2, padding=1, output_padding=1)).double()


def test_convert_keeps_outputs_parameters_and_state_dict():
    model = _model().eval()
    x = torch.randn(1, 2, 5, 5, dtype=torch.float64)
    want = model(x)
    params = dict(model.named_parameters())
    keys = list(model.state_dict())
    assert ct.convert(model) is model
    assert type(model[0]) is ct.Conv2d and type(model[3][0]) is ct.Conv2d
    assert type(model[4]) is ct.ConvTranspose2d and type(model[1]) is nn.BatchNorm2d
    assert all(params[k] is p for k, p in model.named_parameters())  # shared, not copied
    assert list(model.state_dict()) == keys and not model.training
    torch.testing.assert_close(model(x), want)
    ct.revert(model)
    assert type(model[0]) is nn.Conv2d and type(model[4]) is nn.ConvTranspose2d
    assert all(params[k] is p for k, p in model.named_parameters())
    assert not hasattr(model[0], "algorithm")
    torch.testing.assert_close(model(x), want)


def test_convert_a_bare_layer_and_algorithm():
    layer = nn.Conv2d(2, 2, 3)
    new = ct.convert(layer, algorithm="direct")
    assert type(new) is ct.Conv2d and new.weight is layer.weight and new.algorithm == "direct"
    assert repr(new) == repr(layer)[:-1] + ", convlab, algorithm='direct')"
    assert repr(ct.convert(new)).endswith(", convlab, algorithm='auto')")
    assert repr(ct.Conv2d(3, 16, 3)) == "Conv2d(3, 16, kernel_size=(3, 3), stride=(1, 1), convlab, algorithm='auto')"
    with pytest.raises(ValueError, match="unknown algorithm"):
        ct.convert(nn.Conv2d(2, 2, 3), algorithm="nope")
    with pytest.raises(TypeError, match="torch.nn.Module"):
        ct.convert(torch.zeros(2))


def test_a_converted_model_shows_which_layers_are_convlab_s():
    model = _model()
    before = repr(model)
    text = repr(ct.convert(model, algorithm="direct"))
    convlab_lines = [line for line in text.splitlines() if "convlab" in line]
    assert len(convlab_lines) == 3 and all(line.endswith("convlab, algorithm='direct')") for line in convlab_lines)
    assert "ConvTranspose2d(4, 2, kernel_size=(3, 3), stride=(2, 2)" in convlab_lines[2]
    assert "BatchNorm2d(4, eps" in text and "convlab" not in text.split("BatchNorm2d")[1].splitlines()[0]
    assert repr(ct.revert(model)) == before
    for cls, args in ((ct.Conv1d, (2, 2, 3)), (ct.Conv3d, (2, 2, 3)), (ct.ConvTranspose1d, (2, 2, 3)),
                      (ct.ConvTranspose3d, (2, 2, 3))):
        assert repr(cls(*args)).endswith(", convlab, algorithm='auto')"), cls


def test_modules_train_like_torch_and_share_a_pickle_and_deepcopy():
    torch.manual_seed(1)
    mine = ct.Conv2d(2, 3, (3, 2), stride=(2, 1), padding=(1, 0), dilation=(1, 2), dtype=torch.float64)
    ref = nn.Conv2d(2, 3, (3, 2), stride=(2, 1), padding=(1, 0), dilation=(1, 2), dtype=torch.float64)
    ref.load_state_dict(mine.state_dict())
    x = torch.randn(2, 2, 5, 5, dtype=torch.float64)
    mine(x).square().sum().backward()
    ref(x).square().sum().backward()
    torch.testing.assert_close(mine.weight.grad, ref.weight.grad)
    torch.testing.assert_close(mine.bias.grad, ref.bias.grad)
    for clone in (pickle.loads(pickle.dumps(mine)), copy.deepcopy(mine)):
        assert type(clone) is ct.Conv2d and clone.algorithm == "auto"
        torch.testing.assert_close(clone(x), mine(x))


@pytest.mark.parametrize("mode", ["reflect", "circular"])
def test_padding_modes_and_same_padding(mode):
    torch.manual_seed(2)
    ref = nn.Conv2d(2, 2, 3, padding=1, padding_mode=mode, dtype=torch.float64)
    x = torch.randn(1, 2, 4, 4, dtype=torch.float64)
    torch.testing.assert_close(ct.convert(copy.deepcopy(ref))(x), ref(x))
    even = nn.Conv2d(2, 2, (2, 3), padding="same", dtype=torch.float64)  # odd total along H: asymmetric
    torch.testing.assert_close(ct.convert(copy.deepcopy(even))(x), even(x))


def test_conv_transpose_output_size_and_unbatched_input():
    torch.manual_seed(3)
    ref = nn.ConvTranspose2d(2, 2, 3, stride=2, padding=1, dtype=torch.float64)
    mine = ct.convert(copy.deepcopy(ref))
    x = torch.randn(1, 2, 3, 3, dtype=torch.float64)
    torch.testing.assert_close(mine(x, output_size=[6, 6]), ref(x, output_size=[6, 6]))
    assert mine(x, output_size=[6, 6]).shape[-2:] == (6, 6)
    torch.testing.assert_close(mine(x[0]), ref(x[0]))  # (C, H, W)
    with pytest.raises(ValueError, match="zeros"):
        ct.ConvTranspose2d(2, 2, 3, padding_mode="reflect")(x)
