import pytest

import needle_kernels.backend_ndarray as nd


def _params():
    out = []
    for dev in (nd.cpu_numpy(), nd.cpu(), nd.cuda()):
        marks = [pytest.mark.gpu] if dev.name == "cuda" else []
        if not dev.enabled():
            marks.append(pytest.mark.skip(reason=f"{dev} disabled: {dev.reason}"))
        out.append(pytest.param(dev, id=dev.name, marks=marks))
    return out


@pytest.fixture(params=_params(), scope="session")
def device(request):
    return request.param
